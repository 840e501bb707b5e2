"""The app as a newcomer meets it, through Pilot against a real daemon and the fake Ollama:
dialogs are boxes over the app, F2 and the Alt keys, Navi's own keys in F1 and the palette,
an 80x24 terminal, errors that wrap, banners that clear, and OLLAMA_HOST."""

from __future__ import annotations

from typing import Any

import pytest
from textual.containers import Vertical
from textual.widgets import TabbedContent
from textual.widgets._footer import FooterKey

from navi_desktop.memory import search
from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.chat.messages import MessageView
from navi_desktop.tui.chat.prompt import Prompt
from navi_desktop.tui.chat.sessions import SessionsPane
from navi_desktop.tui.dialogs import Dialog
from navi_desktop.tui.inspector.lists import MemoryList
from navi_desktop.tui.inspector.screen import InspectorScreen
from navi_desktop.tui.keys import KeysScreen
from navi_desktop.tui.settings.screen import SettingsScreen
from navi_desktop.tui.widgets.status_line import Banner, StatusLine
from tests.fake_ollama import FakeModel, FakeOllama
from tests.pipeline_helpers import MODELS
from tests.tui_support import DEAD_HOST, SIZE, Daemon, make_home, until

SMALL = (80, 24)


async def ready(app: NaviApp, pilot: Any) -> None:
    await until(pilot, lambda: app.status.memories is not None)


async def add(daemon: Daemon, value: str, **fields: Any) -> None:
    fields.setdefault("category", "preferences")
    await daemon.call("memory.add", {"args": [value], "kwargs": fields})


def text_of(widget: Any) -> str:
    return str(widget.render())


def printed(renderable: Any) -> str:
    """A Rich renderable as plain text, 100 columns wide."""
    import io

    from rich.console import Console

    console = Console(width=100, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


# -- 1: dialogs ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [SMALL, SIZE])
async def test_a_dialog_is_a_centred_box_over_the_app(daemon: Daemon, size) -> None:
    await add(daemon, "green tea", key="drink")
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=size) as pilot:
        await ready(app, pilot)
        await pilot.press("f3")
        await until(pilot, lambda: isinstance(app.screen, InspectorScreen))
        await until(pilot, lambda: app.screen.current is not None)
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, Dialog))
        await pilot.pause(0.1)
        box = app.screen.query_one(Vertical).region
        width, height = size
        assert 0 < box.width < width and 0 < box.height < height
        left, right = box.x, width - box.right
        top, bottom = box.y, height - box.bottom
        assert abs(left - right) <= 1 and abs(top - bottom) <= 1  # centred
        assert app.screen.query_one(Vertical).styles.border_top[0] != ""  # a border
        assert app.screen.styles.background.a < 1  # the app shows through, dimmed


# -- 9: keyboard flow ------------------------------------------------------------------------


async def test_f2_focuses_the_prompt_and_alt_keys_switch_modes(daemon: Daemon) -> None:
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        app.screen.query_one("#sessions").focus()
        await pilot.press("f2")
        await pilot.press(*"Bruno")
        assert app.screen.query_one(Prompt).text == "Bruno"
        await pilot.press("alt+m")
        await until(pilot, lambda: isinstance(app.screen, InspectorScreen))
        await pilot.press("2")  # the memory tabs have keys: 1-4
        await until(pilot, lambda: app.screen.query_one(TabbedContent).active == "inbox")
        await pilot.press("4")
        await until(pilot, lambda: app.screen.query_one(TabbedContent).active == "rules")
        await pilot.press("alt+s")
        await until(pilot, lambda: isinstance(app.screen, SettingsScreen))
        await pilot.press("alt+c")
        await until(pilot, lambda: app.current_mode == "chat")
        assert isinstance(app.focused, Prompt) and app.focused.text == "Bruno"


async def test_alt_keys_from_a_terminal_reach_their_binding_from_a_text_field(
    daemon: Daemon,
) -> None:
    """A terminal sends Alt+M as Esc m, which Textual reads as "alt+m" with the character
    "m": the focused prompt typed "m" and the binding never ran (Pilot's press sends no
    character, so the test above could not see it)."""
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press(*"Bruno")
        for key, on_screen in (("m", InspectorScreen), ("s", SettingsScreen)):
            await pilot.press("f2")
            await until(pilot, lambda: isinstance(app.focused, Prompt))
            for event in terminal_events("\x1b" + key):
                assert (event.key, event.character) == (f"alt+{key}", key)
                app.post_message(event)
            await until(pilot, lambda on_screen=on_screen: isinstance(app.screen, on_screen))
        await pilot.press("f2")
        await until(pilot, lambda: isinstance(app.focused, Prompt))
        assert app.focused.text == "Bruno"  # no "m", no "s"


async def test_every_f_key_has_an_alt_alternative(daemon: Daemon) -> None:
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        for mode in ("chat", "memory", "settings"):
            await app.switch_mode(mode)
            await pilot.pause()
            for _node, bindings in app.screen._binding_chain:
                by_id: dict[str, set[str]] = {}
                for key, found in bindings.key_to_bindings.items():
                    for binding in found:
                        by_id.setdefault(binding.id or binding.action, set()).add(key)
                for ident, keys in by_id.items():
                    if ident.startswith("navi.") and any(
                        k.startswith("f") and k[1:].isdigit() for k in keys
                    ):
                        assert any(k.startswith(("alt+", "ctrl+")) for k in keys), (ident, keys)
                    for key in keys:
                        if key.startswith("alt+") and len(key) == 5:
                            assert terminal_key("\x1b" + key[-1]) == key  # a terminal sends it


def terminal_key(data: str) -> str:
    """What Textual makes of bytes from the terminal (Esc+3 is "£", not Alt+3)."""
    return " ".join(getattr(e, "key", "?") for e in terminal_events(data))


def terminal_events(data: str) -> list[Any]:
    """The events Textual's parser makes of bytes from the terminal."""
    import time

    from textual._xterm_parser import XTermParser

    parser = XTermParser()
    found = list(parser.feed(data))
    time.sleep(0.15)  # a lone Esc waits for what may follow
    return found + list(parser.tick())


# -- 8: F1 and the palette -------------------------------------------------------------------


async def test_f1_lists_navis_keys_once_each(daemon: Daemon) -> None:
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("f1")
        await until(pilot, lambda: isinstance(app.screen, KeysScreen))
        screen = app.screen
        assert isinstance(screen, KeysScreen)
        titles = [c.title for c in screen.commands]
        assert len(titles) == len(set(titles))
        assert {"Send", "New session", "Rename session", "Chat", "Memory", "Keys"} <= set(titles)
        assert not any("Cursor" in t or "Select" in t for t in titles)
        keys = [k for c in screen.commands for k in c.keys]
        assert len(keys) == len(set(keys))  # no key means two things
        assert screen.commands[0].title == "Send"  # Navi's own keys first
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, KeysScreen))


async def test_the_palette_lists_each_command_once(daemon: Daemon) -> None:
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        commands = list(app.get_system_commands(app.screen))
        titles = [c.title for c in commands]
        assert len(titles) == len(set(titles)), titles
        assert titles[0] == "New session"  # Navi's first
        assert "Newline" not in titles  # a key of the prompt, not a command
        helps = {c.title: c.help for c in commands}
        assert helps["Chat"] != "Chat (f2)" and "f2" in helps["Chat"]


# -- 11: small terminals ---------------------------------------------------------------------


def footer_fits(app: NaviApp) -> bool:
    keys = list(app.screen.query(FooterKey))
    return bool(keys) and all(
        k.region.right <= app.size.width and k.region.width >= len(k.description) for k in keys
    )


async def test_at_80x24_the_sidebar_folds_and_nothing_is_cut(daemon: Daemon) -> None:
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SMALL) as pilot:
        await ready(app, pilot)
        chat = app.screen
        pane = chat.query_one(SessionsPane)
        await pilot.pause(0.1)
        assert not pane.display  # folded away below 100 columns
        await pilot.press("ctrl+b")
        await until(pilot, lambda: pane.display and pane.region.width > 0)
        await pilot.press("ctrl+b")
        await until(pilot, lambda: not pane.display)
        assert footer_fits(app)
        labels = [k.description for k in chat.query(FooterKey)]
        assert "Keys" in labels  # F1 always stays: it lists the rest
        status = text_of(chat.query_one(StatusLine))
        assert "profile tester" in status
        await pilot.press("f4")
        await until(pilot, lambda: isinstance(app.screen, SettingsScreen) and app.screen.loaded)
        await pilot.pause(0.1)
        help_below = app.screen.query(".help-below").first()
        assert help_below.display and help_below.region.width >= 40
        assert not app.screen.query(".line .help").first().display
        assert footer_fits(app)


# -- 5: errors wrap --------------------------------------------------------------------------


async def test_a_chat_error_wraps_instead_of_being_cut(tmp_path) -> None:
    daemon = await Daemon(make_home(tmp_path, DEAD_HOST)).start()
    try:
        app = NaviApp(daemon.paths, autostart=False)
        async with app.run_test(size=SMALL) as pilot:
            await ready(app, pilot)
            await pilot.press(*"hello", "enter")
            await until(pilot, lambda: bool(app.screen.query(".note")))
            await pilot.pause(0.1)
            note = app.screen.query(MessageView).last().query_one(".note")
            assert "ollama serve" in text_of(note)
            transcript = app.screen.query_one("#transcript").region
            assert note.region.right <= transcript.right
            assert note.region.height >= 2  # the whole instruction, on two lines
    finally:
        await daemon.stop()


# -- 4: stale banners ------------------------------------------------------------------------


async def test_the_missing_model_banner_clears_after_a_pull(fake, tmp_path) -> None:
    paths = make_home(tmp_path, fake.url)
    text = paths.config_file.read_text().replace('embedder = "none"', 'embedder = "ollama"')
    paths.config_file.write_text(text)
    daemon = await Daemon(paths).start()
    try:
        app = NaviApp(paths, autostart=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            banner = app.screen.query_one(Banner)
            await until(pilot, lambda: "'nomic-embed-text' is not installed" in text_of(banner))
            await pilot.press("f4")
            await until(pilot, lambda: isinstance(app.screen, SettingsScreen) and app.screen.loaded)
            note = app.screen.query_one("#f-ollama-embedding-model-note")
            await until(pilot, lambda: note.query_one("Button").display)
            note.query_one("Button").press()
            await until(pilot, lambda: app.status.missing_models == ())
            assert not app.screen.query_one(Banner).has_class("-shown")
    finally:
        await daemon.stop()


# -- 3: OLLAMA_HOST --------------------------------------------------------------------------


async def test_an_ollama_host_the_daemon_does_not_use_is_named(daemon, monkeypatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:11435")
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        banner = app.screen.query_one(Banner)
        await until(pilot, lambda: "OLLAMA_HOST=127.0.0.1:11435 is not used" in text_of(banner))
        assert "config.toml" in text_of(banner)  # the test home sets the host there


# -- 7: no matches ---------------------------------------------------------------------------


async def test_gibberish_finds_no_memory(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(search.VECTOR_FLOOR, "ollama/nomic-embed-text", 0.5)
    models = [*MODELS, FakeModel("nomic-embed-text", ("embedding",), embed_dim=64)]
    async with FakeOllama(models) as fake:
        paths = make_home(tmp_path, fake.url)
        text = paths.config_file.read_text().replace('embedder = "none"', 'embedder = "ollama"')
        paths.config_file.write_text(text)
        daemon = await Daemon(paths).start()
        try:
            for value in ("green tea", "Lisbon", "a cat named Miso"):
                await add(daemon, value, key=value.split()[-1])

            async def embedded() -> bool:
                stats = await daemon.call("memory.stats")
                return not stats.get("missing_embeddings")

            app = NaviApp(paths, autostart=False)
            async with app.run_test(size=SIZE) as pilot:
                await ready(app, pilot)
                for _ in range(100):
                    if await embedded():
                        break
                    await pilot.pause(0.1)
                await pilot.press("f3")
                await until(pilot, lambda: isinstance(app.screen, InspectorScreen))
                screen = app.screen
                await pilot.press("slash", *"zzzqqq")
                facts = screen.query_one("#list-facts", MemoryList)
                await until(
                    pilot, lambda: "Nothing matches" in str(facts.get_option_at_index(0).prompt)
                )
                assert facts.memories == {}
        finally:
            await daemon.stop()


# -- 10: model pickers -----------------------------------------------------------------------


async def test_the_chat_model_picker_lists_only_models_that_chat(tmp_path) -> None:
    from textual.widgets import Select

    from navi_desktop.tui.chat.models import ModelPicker

    models = [*MODELS, FakeModel("nomic-embed-text", ("embedding",), embed_dim=64)]
    async with FakeOllama(models) as fake:
        daemon = await Daemon(make_home(tmp_path, fake.url)).start()
        try:
            app = NaviApp(daemon.paths, autostart=False)
            async with app.run_test(size=SIZE) as pilot:
                await ready(app, pilot)
                await pilot.press("alt+o")  # "Switch chat model" in the palette
                await until(pilot, lambda: isinstance(app.screen, ModelPicker))
                picker = app.screen
                assert [m["name"] for m in picker.models] == ["llama3.2:latest", "gemma2:latest"]
                assert "3.2B" in str(picker.query_one("OptionList").get_option_at_index(0).prompt)
                await pilot.press("down", "enter")
                await until(pilot, lambda: app.settings.ollama.chat_model == "gemma2:latest")

                await pilot.press("f4")
                await until(
                    pilot, lambda: isinstance(app.screen, SettingsScreen) and app.screen.loaded
                )
                chat = app.screen.query_one("#f-ollama-chat-model", Select)
                embed = app.screen.query_one("#f-ollama-embedding-model", Select)
                await until(pilot, lambda: len(chat._options) > 1 and len(embed._options) > 1)
                chat_values = [value for _, value in chat._options]
                embed_values = [value for _, value in embed._options]
                assert not any("nomic" in str(v) for v in chat_values)
                assert any("nomic" in str(v) for v in embed_values)
                assert not any("llama" in str(v) for v in embed_values)
        finally:
            await daemon.stop()


# -- 12: smaller ones ------------------------------------------------------------------------


async def test_relative_times_move_on(daemon: Daemon, monkeypatch) -> None:
    from datetime import timedelta

    from navi_desktop.tui import timefmt

    await add(daemon, "green tea", key="drink")
    monkeypatch.setattr(timefmt, "RETIME_S", 0.2)
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press(*"hello", "enter")
        pane = app.screen.query_one(SessionsPane)
        options = pane.query_one("#sessions")
        await until(
            pilot,
            lambda: options.option_count and "now" in str(options.get_option_at_index(0).prompt),
        )
        await pilot.press("f3")
        await until(pilot, lambda: isinstance(app.screen, InspectorScreen))
        screen = app.screen
        await until(pilot, lambda: screen.history_of is not None)
        assert "just now" in printed(screen.query_one("#detail").content)
        later = timefmt.clock() + timedelta(minutes=11)
        monkeypatch.setattr(timefmt, "clock", lambda: later)

        def shown() -> str:
            return printed(screen.query_one("#detail").content)

        await until(pilot, lambda: "11m ago" in shown() and "just now" not in shown())
        await pilot.press("f2")
        await until(pilot, lambda: "11m" in str(options.get_option_at_index(0).prompt))


def test_history_reads_as_a_person_would_say_it() -> None:
    from navi_desktop.tui.inspector.detail import change

    def entry(action: str, actor: str = "user", **kw: Any) -> dict[str, Any]:
        return {"action": action, "actor": actor, "at": "2024-01-01T00:00:00+00:00", **kw}

    pinned = entry(
        "pin", old={"status": "active", "pinned": 0}, new={"status": "active", "pinned": 1}
    )
    assert change(pinned) == "pinned by you"
    assert change(entry("supersedes", "extraction", new={"supersedes": 4})) == "replaces #4"
    assert change(entry("superseded", "extraction", new={"superseded_by": 9})) == "replaced by #9"
    assert change(entry("create", "extraction")) == "learned from Navi, from a conversation"
    assert (
        change(entry("strengthen", "extraction", new={"mentions": 3}))
        == "mentioned again (3 times now)"
    )
    archived = entry("archive", "decay", old={"status": "active"}, new={"status": "archived"})
    assert change(archived) == "archived: it faded from disuse"
    for text in (change(pinned), change(archived)):
        assert "->" not in text and "→" not in text and ":" not in text.split("archived")[0]


async def test_a_stopped_daemon_is_not_started_again_behind_the_users_back(fake, tmp_path) -> None:
    paths = make_home(tmp_path, fake.url)
    running = [await Daemon(paths).start()]
    asked: list[bool] = []
    app = NaviApp(paths, autostart=True)
    plain_connect = app.link._connect

    async def connect(autostart: bool) -> Any:
        asked.append(autostart or app.link._restart)
        if app.link._restart:  # what connect() would do: start one, here on this loop
            running.append(await Daemon(paths).start())
        return await plain_connect(False)

    app.link._connect = connect  # type: ignore[method-assign]
    try:
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            assert asked == [True]
            await running[0].stop()  # `navi daemon stop`
            banner = app.screen.query_one(Banner)
            said = f"it is no longer running (stopped, or it ended: {paths.daemon_log} says why);"
            await until(pilot, lambda: said in text_of(banner))
            assert "Alt+G starts it again" in text_of(banner)
            await until(pilot, lambda: len(asked) >= 3)
            assert not any(asked[1:])  # every try since: join a daemon, never start one
            await pilot.press("alt+g")
            await until(pilot, lambda: app.status.daemon == "up")
            assert len(running) == 2 and not app.screen.query_one(Banner).has_class("-shown")
    finally:
        await running[-1].stop()
