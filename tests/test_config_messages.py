"""What config.toml's problems look like wherever they are shown: a typo in a key binding or a
theme is said (with the valid choices), forty problems do not fill the screen, and a host's
password is never shown."""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import string
from pathlib import Path

import pytest
from textual.binding import Binding
from textual.keys import Keys, _character_to_key
from textual.theme import BUILTIN_THEMES

import navi_desktop.tui
from navi_desktop.config import load_settings
from navi_desktop.config_specs import BINDING_IDS, THEMES, BadValue, key_string
from navi_desktop.ollama_host import env_host_problems, shown_url
from navi_desktop.tui.app import NaviApp
from tests.daemon_home import navi as run_navi
from tests.tui_support import DEAD_HOST, Daemon, banner, make_home, until

PASSWORD = "hunter2"


def app_binding_ids() -> set[str]:
    found: set[str] = set()
    for module in pkgutil.walk_packages(navi_desktop.tui.__path__, "navi_desktop.tui."):
        for _, cls in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
            for binding in getattr(cls, "BINDINGS", []):
                if isinstance(binding, Binding) and binding.id:
                    found.add(binding.id)
    return found


def test_the_known_binding_ids_and_themes_are_the_apps():
    # The settings check knows them without loading Textual; these hold it to the app's.
    assert app_binding_ids() == BINDING_IDS
    assert set(THEMES) == set(BUILTIN_THEMES)


def app_default_keys() -> set[str]:
    found: set[str] = set()
    for module in pkgutil.walk_packages(navi_desktop.tui.__path__, "navi_desktop.tui."):
        for _, cls in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
            for binding in getattr(cls, "BINDINGS", []):
                if isinstance(binding, Binding):
                    found.update(binding.key.split(","))
    return found


def test_every_key_textual_names_is_taken_and_a_typo_is_not():
    """Key names were checked by their shape: "escpae" was taken, and never fired. The names
    known here are held to Textual's: its named keys, the names it gives characters, and
    every key the app binds by default."""
    named = {k.value for k in Keys if not k.value.startswith("<") and "+" not in k.value}
    characters = {_character_to_key(c) for c in string.printable if not c.isspace()}
    for key in sorted((named - {"ctrl-at"}) | characters | app_default_keys()):
        assert key_string(f"ctrl+{key}") == f"ctrl+{key}"
    for typo, meant in [("escpae", "escape"), ("pgup", "pageup"), ("f25", "f5")]:
        with pytest.raises(BadValue, match=f"did you mean '{meant}'"):
            key_string(f"alt+{typo}")
    for not_a_key in ("a1", "ctrl+question mark", "", "ctrl+<any>"):
        with pytest.raises(BadValue):
            key_string(not_a_key)


async def test_a_typo_in_a_key_binding_or_theme_is_said(tmp_path: Path):
    # Before, both were accepted in silence: Ctrl+Q no longer quit and nothing said why.
    paths = make_home(
        tmp_path,
        DEAD_HOST,
        extra='[ui]\ntheme = "nrod"\n[ui.keymap]\n"navi.chat.nwe" = "alt+n"\n'
        '"navi.quit" = "ctrl+"\n',
    )
    _, errors = load_settings(paths.config_file)
    lines = {e.key: e.reason for e in errors}
    assert lines["ui.theme"].startswith("'nrod' is not a theme (did you mean 'nord'?); the themes:")
    assert lines["ui.keymap.navi.chat.nwe"].startswith(
        "is not a binding id (did you mean 'navi.chat.new'?); the navi.chat ones:"
    )
    assert "its key 'alt+n' is ignored" in lines["ui.keymap.navi.chat.nwe"]
    assert "got 'ctrl+'; its default key stays in force" in lines["ui.keymap.navi.quit"]
    daemon = await Daemon(paths).start()
    try:
        app = NaviApp(paths, autostart=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: "ui.theme: 'nrod' is not a theme" in banner(app))
            assert "ui.keymap.navi.chat.nwe" in banner(app)
            await pilot.press("ctrl+q")  # the bad key was not taken: Ctrl+Q quits
            await until(pilot, lambda: not app.is_running)
            assert not app.is_running
    finally:
        await daemon.stop()


async def test_forty_problems_are_three_lines_and_a_count(tmp_path: Path):
    # Before, 40 unknown keys filled the whole chat screen at 80x24, and the settings screen
    # showed no field.
    old = "".join(f"old_setting_{i} = {i}\n" for i in range(1, 41))
    paths = make_home(tmp_path, DEAD_HOST, extra=old)
    daemon = await Daemon(paths).start()
    try:
        app = NaviApp(paths, autostart=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: "and 37 more" in banner(app))
            lines = [x for x in banner(app).splitlines() if x.startswith("⚠ config.toml")]
            assert len(lines) == 4, lines
            assert lines[0].startswith("⚠ config.toml: memory.old_setting_1: unknown setting;")
            assert lines[-1] == "⚠ config.toml: and 37 more: `navi config check` lists them all"
            await pilot.press("f4")  # the settings screen lists them once, and its fields
            await until(
                pilot, lambda: "and 37 more" in str(app.screen.query_one("#config-errors").render())
            )
            assert "config.toml" not in banner(app)
            app.save_screenshot(str(tmp_path / "settings.svg"))
    finally:
        await daemon.stop()
    done = run_navi({**os.environ, "NAVI_HOME": str(paths.config.parent)}, "config", "check")
    assert done.returncode == 2 and done.stderr == ""
    assert len(done.stdout.splitlines()) == 40


def test_a_host_password_is_never_shown(tmp_path: Path):
    # Before, the refusal printed it: on every command's stderr and in the daemon's log.
    host = f"https://navi:{PASSWORD}@ollama.example.com"
    paths = make_home(tmp_path, host, extra=f'dsn = "mysql://navi:{PASSWORD}@db/navi"\n')
    environ = {**os.environ, "NAVI_HOME": str(paths.config.parent), "NAVI_DAEMON": "on"}
    try:
        done = run_navi(environ, "memory", "list")
        assert PASSWORD not in done.stderr + done.stdout
        assert "got 'https://navi:***@ollama.example.com'" in done.stderr
        assert "got 'mysql://navi:***@db/navi'" in done.stderr
        status = run_navi(environ, "daemon", "status")
        assert PASSWORD not in status.stdout + status.stderr
    finally:
        run_navi(environ, "daemon", "stop")
    log = paths.daemon_log.read_text()
    assert "ollama.host: must be a URL" in log and PASSWORD not in log
    problems = env_host_problems({"OLLAMA_HOST": f"http://me:{PASSWORD}@h:1/?x"})
    assert len(problems) == 1 and PASSWORD not in problems[0] and "me:***@h" in problems[0]
    for secret in ("pa/ss", "p@ss/w"):  # what a URL-encoding user may leave as it is
        assert shown_url(f"mysql://navi:{secret}@db/navi") == "mysql://navi:***@db/navi"
