"""The app's screenshot (command palette: Screenshot) shows what the user said and what Navi
remembers: it is written private (0600), like an export, and never over another file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import platformdirs
import pytest
from textual.app import App, ComposeResult
from textual.widgets import Static

from navi_desktop.tui.keys import save_screenshot


class Shown(App[None]):
    def compose(self) -> ComposeResult:
        yield Static("my locker code is 4711")


async def test_a_screenshot_is_private_and_never_replaces_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    downloads = tmp_path / "Downloads"  # made when missing
    monkeypatch.setattr(platformdirs, "user_downloads_dir", lambda: str(downloads))
    async with Shown().run_test(size=(80, 24)) as pilot:
        first = save_screenshot(pilot.app)
        second = save_screenshot(pilot.app)  # within the same second
    for path in (first, second):
        assert path.parent == downloads and path.suffix == ".svg"
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        assert "4711" in path.read_text() and "<svg" in path.read_text()
    assert first != second
    assert sorted(p.name for p in downloads.iterdir()) == sorted([first.name, second.name])


async def test_a_link_at_the_name_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(platformdirs, "user_downloads_dir", lambda: str(tmp_path))
    target = tmp_path / "elsewhere.txt"
    target.write_text("not a screenshot")
    async with Shown().run_test(size=(80, 24)) as pilot:
        planted = save_screenshot(pilot.app)
        planted.unlink()
        planted.symlink_to(target)
        made = save_screenshot(pilot.app)
    assert made != planted and made.is_file() and not made.is_symlink()
    assert target.read_text() == "not a screenshot"
