"""The settings screen against a real daemon and the fake Ollama: loading, checking as the
user types, saving through the daemon (comments kept), live edits from disk, and Ollama's
connection test, model list and pulls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, ProgressBar, Static

from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.settings.fields import FIELDS
from navi_desktop.tui.settings.form import SettingsForm
from navi_desktop.tui.settings.screen import SettingsScreen
from tests.tui_support import (
    SIZE,
    Daemon,
    make_home,
    snapshot_daemon,
    until,
)

SNAPSHOT_PORT = 27813  # other TUI snapshot tests use 27811 and 27812 at the same time


@pytest.fixture
def home(daemon: Daemon) -> Any:
    return daemon.paths


def config_file(paths: Any) -> Path:
    return paths.config_file


def screen_of(app: NaviApp) -> SettingsScreen:
    screen = app.screen
    assert isinstance(screen, SettingsScreen)
    return screen


def widget(app: NaviApp, key: str) -> Any:
    return app.screen.query_one(f"#{FIELDS[key].widget_id}")


def error_text(app: NaviApp, key: str) -> str:
    error = app.screen.query_one(f"#{FIELDS[key].widget_id}-error", Static)
    return str(error.render()) if error.has_class("-shown") else ""


def text_of(app: NaviApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


async def open_settings(app: NaviApp, pilot: Any) -> SettingsScreen:
    await pilot.press("f4")
    await until(pilot, lambda: isinstance(app.screen, SettingsScreen) and app.screen.loaded)
    screen = screen_of(app)
    # The model list comes after the values: wait for it too.
    await until(pilot, lambda: screen.form.note(FIELDS["ollama.chat_model"]).installed is not None)
    return screen


async def type_into(pilot: Any, app: NaviApp, key: str, text: str) -> None:
    field = widget(app, key)
    field.focus()
    field.value = ""
    await pilot.press(*text)
    await pilot.pause()


async def test_values_are_loaded(home: Any, fake: Any) -> None:
    app = NaviApp(home, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_settings(app, pilot)
        assert widget(app, "ollama.host").value == fake.url
        assert widget(app, "ollama.chat_model").value == "llama3.2"
        assert widget(app, "memory.profile").value == "tester"
        assert widget(app, "memory.budget_tokens").value == "800"
        assert widget(app, "memory.inactivity_timeout_min").value == "30"
        assert widget(app, "ollama.timeout_s").value == "120"
        assert widget(app, "memory.embedder").value == "none"
        assert widget(app, "incognito.read_memory").value is False
        assert widget(app, "ui.theme").value == app.theme
        # Every field says what it is for.
        help_lines = [str(s.render()) for s in app.screen.query(".help").results(Static)]
        assert "Tokens of memory put into each turn" in help_lines
        assert not app.screen.query_one("#config-errors").has_class("-shown")


async def test_f4_focuses_the_first_setting_so_typing_edits_it(home: Any, fake: Any) -> None:
    """As F2 focuses the prompt and F3 the memory list (before, F4 focused nothing and what
    was typed after it went nowhere)."""
    app = NaviApp(home, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_settings(app, pilot)
        host = widget(app, "ollama.host")
        await until(pilot, lambda: app.focused is host)
        await pilot.press("end", *"0")
        assert host.value == fake.url + "0"
        await pilot.press("f2")
        await until(pilot, lambda: app.current_mode == "chat")
        await pilot.press("f4")
        await until(pilot, lambda: app.focused is host)


async def test_invalid_values_show_inline_and_are_not_saved(home: Any) -> None:
    before = config_file(home).read_text()
    app = NaviApp(home, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_settings(app, pilot)
        await type_into(pilot, app, "memory.budget_tokens", "abc")
        assert "must be an integer between 100 and 8000, got 'abc'" in error_text(
            app, "memory.budget_tokens"
        )
        await type_into(pilot, app, "memory.budget_tokens", "5")
        assert "got 5" in error_text(app, "memory.budget_tokens")
        await type_into(pilot, app, "ollama.host", "not a host")
        assert "must be a URL" in error_text(app, "ollama.host")
        await pilot.press("ctrl+s")
        await pilot.pause(0.3)
        assert config_file(home).read_text() == before
        # Fixing the value clears its error.
        await type_into(pilot, app, "memory.budget_tokens", "900")
        assert error_text(app, "memory.budget_tokens") == ""


async def test_a_valid_change_is_saved_keeping_comments(home: Any) -> None:
    app = NaviApp(home, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_settings(app, pilot)
        await type_into(pilot, app, "memory.budget_tokens", "900")
        widget(app, "incognito.read_memory").value = True
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "budget_tokens = 900" in config_file(home).read_text())
        text = config_file(home).read_text()
        assert text.startswith("# test settings\n")
        assert "read_memory = true" in text
        # Only the changed keys were written: the others keep their defaults (absent).
        assert "timeout_s" not in text and "theme" not in text
        await until(pilot, lambda: screen.loaded and screen.loaded["memory.budget_tokens"] == 900)
        assert not screen.form.dirty_fields()


async def test_revert_reloads_from_the_daemon(home: Any) -> None:
    app = NaviApp(home, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_settings(app, pilot)
        await type_into(pilot, app, "memory.budget_tokens", "abc")
        await pilot.press("escape")
        await until(pilot, lambda: widget(app, "memory.budget_tokens").value == "800")
        assert error_text(app, "memory.budget_tokens") == ""
        assert not screen.form.dirty_fields()


async def test_connection_test_ok_and_dead_host(home: Any, fake: Any) -> None:
    app = NaviApp(home, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_settings(app, pilot)
        await pilot.click("#test")
        await until(pilot, lambda: "✓" in text_of(app, "#test-result"))
        assert f"Ollama {fake.version} answers at {fake.url}" in text_of(app, "#test-result")

        await type_into(pilot, app, "ollama.host", "http://127.0.0.1:9")
        await pilot.press("ctrl+t")
        await until(pilot, lambda: "✕" in text_of(app, "#test-result"))
        assert app.screen.query_one("#test-result").has_class("-bad")
        # The unreachable host's model list falls back to the current value.
        note = screen_of(app).form.note(FIELDS["ollama.chat_model"])
        await until(pilot, lambda: note.installed is None)
        assert widget(app, "ollama.chat_model").value == "llama3.2"
        assert "cannot list the installed models" in str(note.query_one(".model-note").render())


async def test_models_are_listed_from_ollama(home: Any) -> None:
    app = NaviApp(home, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_settings(app, pilot)
        select = widget(app, "ollama.chat_model")
        values = [value for _, value in select._options]
        assert "llama3.2" in values and "gemma2:latest" in values
        assert select.value == "llama3.2"
        # Choosing another installed model is a change that can be saved.
        select.value = "gemma2:latest"
        await pilot.pause()
        assert [f.key for f in screen.form.dirty_fields()] == ["ollama.chat_model"]


async def test_pulling_a_missing_model_shows_progress(home: Any, fake: Any) -> None:
    app = NaviApp(home, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_settings(app, pilot)
        field = FIELDS["ollama.embedding_model"]
        note = screen.form.note(field)
        note_text = note.query_one(".model-note", Static)
        assert "'nomic-embed-text' is not installed" in str(note_text.render())
        seen: list[str] = []
        original = note.pull_progress

        def spy(params: dict[str, Any]) -> None:
            seen.append(str(params.get("status")))
            original(params)

        note.pull_progress = spy  # type: ignore[method-assign]
        note.query_one("Button").press()
        await until(pilot, lambda: "pulled 'nomic-embed-text'" in str(note_text.render()))
        assert "pulling manifest" in seen
        bar = note.query_one(ProgressBar)
        assert bar.total and bar.progress == bar.total
        # The list is refreshed: the model is installed now, so no more "not installed".
        await until(pilot, lambda: note.is_installed("nomic-embed-text"))
        assert "nomic-embed-text:latest" in fake.models


async def test_a_failed_pull_is_reported(home: Any, fake: Any) -> None:
    fake.pull_missing.add("nomic-embed-text")
    app = NaviApp(home, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_settings(app, pilot)
        note = screen.form.note(FIELDS["ollama.embedding_model"])
        note.query_one("Button").press()
        await until(pilot, lambda: "failed" in str(note.query_one(".model-note").render()))
        assert any("Pulling nomic-embed-text failed" in n.message for n in app._notifications)


async def test_edit_on_disk_appears_live_and_keeps_edits(home: Any) -> None:
    app = NaviApp(home, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_settings(app, pilot)
        await type_into(pilot, app, "memory.budget_tokens", "1234")  # being edited: kept
        text = config_file(home).read_text()
        text = text.replace("inactivity_timeout_min = 30", "inactivity_timeout_min = 45")
        text += "budget_tokens = 700\n"
        config_file(home).write_text(text)
        await until(
            pilot, lambda: widget(app, "memory.inactivity_timeout_min").value == "45", timeout=15
        )
        assert widget(app, "memory.budget_tokens").value == "1234"


async def test_config_errors_are_shown_at_the_top(tmp_path: Path, fake: Any) -> None:
    paths = make_home(tmp_path, fake.url, extra="budget_tokens = 5\n")
    daemon = await Daemon(paths).start()
    try:
        app = NaviApp(paths, autostart=False)
        async with app.run_test(size=SIZE) as pilot:
            await open_settings(app, pilot)
            box = app.screen.query_one("#config-errors", Static)
            assert box.has_class("-shown")
            assert "memory.budget_tokens: must be an integer" in str(box.render())
    finally:
        await daemon.stop()


async def test_an_unset_host_shows_the_one_the_daemon_uses(
    tmp_path: Path, fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = make_home(tmp_path, fake.url)
    config_file(paths).write_text('[memory]\nembedder = "none"\n')  # no host
    monkeypatch.setenv("OLLAMA_HOST", fake.url.removeprefix("http://"))  # the daemon's own
    daemon = await Daemon(paths).start()
    try:
        app = NaviApp(paths, autostart=False)
        async with app.run_test(size=SIZE) as pilot:
            await open_settings(app, pilot)
            host = widget(app, "ollama.host")
            assert host.value == "" and host.placeholder == fake.url
    finally:
        await daemon.stop()


async def test_empty_state_when_the_daemon_is_down(tmp_path: Path) -> None:
    paths = make_home(tmp_path, "http://127.0.0.1:9")
    app = NaviApp(paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f4")
        await until(pilot, lambda: isinstance(app.screen, SettingsScreen))
        screen = screen_of(app)
        await until(pilot, lambda: "not answering" in text_of(app, "#empty"))
        assert screen.has_class("-empty")
        assert not screen.query_one(SettingsForm).display
        await pilot.press("ctrl+s")  # greyed out: nothing happens, no traceback
        await pilot.pause()


async def test_a_saved_theme_applies_at_once(home: Any) -> None:
    app = NaviApp(home, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_settings(app, pilot)
        theme = "nord" if app.theme != "nord" else "gruvbox"
        widget(app, "ui.theme").value = theme
        await pilot.press("ctrl+s")
        await until(pilot, lambda: app.theme == theme)
        assert f'theme = "{theme}"' in config_file(home).read_text()


async def test_the_daemon_going_away_and_back_keeps_edits(tmp_path: Path, fake: Any) -> None:
    paths = make_home(tmp_path, fake.url)
    daemon = await Daemon(paths).start()
    app = NaviApp(paths, autostart=False)
    try:
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_settings(app, pilot)
            await type_into(pilot, app, "memory.budget_tokens", "1234")
            await daemon.stop()
            await until(pilot, lambda: screen.has_class("-empty"))
            assert "not answering" in text_of(app, "#empty")
            daemon = await Daemon(paths).start()
            await until(pilot, lambda: not screen.has_class("-empty"), timeout=15)
            assert widget(app, "memory.budget_tokens").value == "1234"
    finally:
        await daemon.stop()


async def test_bindings_are_palette_commands(home: Any) -> None:
    app = NaviApp(home, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_settings(app, pilot)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Save settings", "Revert changes", "Test connection"} <= titles
        ids = [b.id for _, b in app.screen._bindings]
        assert all(i.startswith("navi.settings.") for i in ids if i)


# ---- snapshot ----------------------------------------------------------------------------------


def test_snapshot_inline_error(tmp_path: Path, snap_compare: Any) -> None:
    with snapshot_daemon(tmp_path, SNAPSHOT_PORT) as daemon:
        app = NaviApp(daemon.paths, autostart=False)

        async def run_before(pilot: Any) -> None:
            await pilot.pause()
            await pilot.press("f4")
            await until(pilot, lambda: isinstance(app.screen, SettingsScreen))
            screen = screen_of(app)
            note = screen.form.note(FIELDS["ollama.chat_model"])
            await until(pilot, lambda: screen.loaded and note.installed is not None)
            await until(pilot, lambda: app.status.memories is not None)
            for field in screen.query(Input):
                field.cursor_blink = False  # a blinking cursor is drawn either way
            await type_into(pilot, app, "memory.budget_tokens", "abc")
            await until(pilot, lambda: error_text(app, "memory.budget_tokens"))

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


# ---- conversions (no app) ----------------------------------------------------------------------


def test_field_text_becomes_setting_values() -> None:
    from navi_desktop.tui.settings.fields import from_widget, to_widget

    assert from_widget(FIELDS["ollama.host"], "  ") is None  # empty: unset, the default applies
    assert from_widget(FIELDS["ollama.timeout_s"], "2.5") == 2.5
    assert to_widget(FIELDS["ollama.timeout_s"], 120.0) == "120"
    assert from_widget(FIELDS["memory.budget_tokens"], "900") == 900
    with pytest.raises(ValueError, match=r"between 100 and 8000, got '9\.5'"):
        from_widget(FIELDS["memory.budget_tokens"], "9.5")
    with pytest.raises(ValueError, match="greater than 0"):
        from_widget(FIELDS["ollama.timeout_s"], "0")


async def test_text_like_markup_in_a_field_is_shown_not_read(home: Any) -> None:
    """Typing "[/]" into a number field ended the app with a MarkupError (the error line
    read the value as markup), losing every unsaved edit."""
    app = NaviApp(home, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await open_settings(app, pilot)
        await type_into(pilot, app, "memory.budget_tokens", "[/]")
        assert "got '[/]'" in error_text(app, "memory.budget_tokens")
        await type_into(pilot, app, "memory.budget_tokens", "[b]x")
        assert "got '[b]x'" in error_text(app, "memory.budget_tokens")
        assert app.is_running and isinstance(app.screen, SettingsScreen)
