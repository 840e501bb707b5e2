"""config.toml's problems and a damaged profile reach every client, not only the daemon's log:
``daemon.status`` carries them, the CLI prints one warning line each (key, reason, the value
in force), and the TUI's banner shows them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from navi_desktop.tui.app import NaviApp
from tests.daemon_home import navi as run_navi
from tests.test_profile_errors import half, make_profiles
from tests.tui_support import DEAD_HOST, SIZE, Daemon, ThreadedDaemon, banner, make_home, until

BAD = "memory.budget_tokens: must be an integer between 100 and 8000, got 'lots'"


def set_budget(paths: Any, value: str) -> None:
    text = paths.config_file.read_text()
    lines = [line for line in text.splitlines() if not line.startswith("budget_tokens")]
    paths.config_file.write_text("\n".join(lines) + f"\nbudget_tokens = {value}\n")


async def test_daemon_status_carries_the_config_errors_with_the_value_in_force(tmp_path: Path):
    paths = make_home(tmp_path, DEAD_HOST, extra='budget_tokens = "lots"\n')
    daemon = await Daemon(paths).start()
    try:
        status = await daemon.call("daemon.status")
        assert status["config_errors"] == [f"{BAD}; the default (800) stays in force"]
        set_budget(paths, "1200")
        for _ in range(200):  # the watcher applies edits made in any editor
            if not (await daemon.call("daemon.status"))["config_errors"]:
                break
            await asyncio.sleep(0.05)
        set_budget(paths, '"lots"')
        for _ in range(200):
            errors = (await daemon.call("daemon.status"))["config_errors"]
            if errors:
                break
            await asyncio.sleep(0.05)
        assert errors == [f"{BAD}; the last good value (1200) stays in force"]
    finally:
        await daemon.stop()


def navi(home: Path, *args: str, daemon: str = "on") -> subprocess.CompletedProcess[str]:
    return run_navi({**os.environ, "NAVI_HOME": str(home), "NAVI_DAEMON": daemon}, *args)


def test_the_cli_prints_one_warning_line_per_problem(tmp_path: Path):
    paths = make_home(tmp_path, DEAD_HOST, extra='budget_tokens = "lots"\n')
    done = navi(tmp_path / "home", "memory", "stats", daemon="off")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"navi: warning: config.toml: {BAD}; the default (800) stays in force"
    ]
    paths.config_file.write_text("[memory\nbudget_tokens = 900\n")
    done = navi(tmp_path / "home", "memory", "stats", daemon="off")
    (line,) = done.stderr.splitlines()
    assert "is not valid TOML at line 1" in line and "defaults are in force" in line


def test_the_cli_says_the_daemons_last_good_value(tmp_path: Path):
    paths = make_home(tmp_path, DEAD_HOST, extra="budget_tokens = 1200\n")
    daemon = ThreadedDaemon(paths).start()
    try:
        set_budget(paths, '"lots"')
        deadline = time.monotonic() + 10
        while not daemon.call("settings.get")["errors"] and time.monotonic() < deadline:
            time.sleep(0.05)
        done = navi(tmp_path / "home", "memory", "stats")
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines() == [
            f"navi: warning: config.toml: {BAD}; the last good value (1200) stays in force"
        ]
    finally:
        daemon.stop()


async def test_the_banner_shows_config_errors_and_a_damaged_profile(tmp_path: Path):
    paths = make_home(tmp_path, DEAD_HOST, extra='budget_tokens = "lots"\n')
    await make_profiles(paths, "tester")
    half(paths.profile_db("tester"))
    daemon = await Daemon(paths).start()
    try:
        app = NaviApp(paths, autostart=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "Memory 'tester' cannot be used:" in banner(app))
            text = banner(app)
            assert "is damaged" in text
            assert "navi memory doctor --profile tester" in text
            assert f"config.toml: {BAD}; the default (800) stays in force" in text
    finally:
        await daemon.stop()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("[memory]\nbudget_tokens = " + "9" * 5000 + "\n", "a number too long to read"),
        ("x = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deep"),
    ],
    ids=["long-number", "deep-arrays"],
)
def test_a_config_past_the_parsers_limits_is_one_line_not_a_crash(
    tmp_path: Path, content: str, said: str
):
    """Every command, the app and the daemon's start ended in a traceback (a ValueError or a
    RecursionError from the parser, which is not a syntax error), and a save in an error
    that said nothing."""
    from navi_desktop.config_save import save_settings
    from navi_desktop.errors import InvalidInput

    paths = make_home(tmp_path, DEAD_HOST)
    paths.config_file.write_text(content)
    done = navi(tmp_path / "home", "memory", "stats", daemon="off")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.splitlines()
    assert said in line and "the defaults are in force" in line, line
    with pytest.raises(InvalidInput, match=said):
        save_settings(paths.config_file, {"memory.budget_tokens": 900})
    assert paths.config_file.read_text() == content
