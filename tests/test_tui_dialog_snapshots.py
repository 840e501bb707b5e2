"""Snapshots of every dialog (a centred box over the dimmed app), of the F1 keys panel, and
of each mode at 80x24, the smallest terminal the app is made for.

The daemon and the fake Ollama run in threads (``snap_compare`` runs the app on its own
loop); the fake listens on a fixed port because the status line shows the host."""

from __future__ import annotations

from typing import Any

import pytest

from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.chat.messages import MessageView
from navi_desktop.tui.dialogs import Dialog
from navi_desktop.tui.inspector.screen import InspectorScreen
from navi_desktop.tui.keys import KeysScreen
from navi_desktop.tui.settings.screen import SettingsScreen
from tests.fake_ollama import Reply
from tests.tui_support import SIZE, ThreadedDaemon, snapshot_daemon, until

PORT = 27814  # other snapshot tests use 27811-27813 at the same time
SMALL = (80, 24)


@pytest.fixture
def running(tmp_path: Any) -> Any:
    with snapshot_daemon(tmp_path, PORT) as daemon:
        daemon.call(
            "memory.add",
            {
                "args": ["green tea, no sugar"],
                "kwargs": {
                    "category": "preferences",
                    "key": "drink",
                    "evidence": "I only drink green tea, never with sugar",
                },
            },
        )
        daemon.call(
            "memory.add",
            {
                "args": ["sees a cardiologist in May"],
                "kwargs": {
                    "category": "health",
                    "key": "doctor",
                    "status": "held",
                    "source": "conversation",
                    "review_reason": "sensitive: health",
                },
            },
        )
        yield daemon


def still(app: NaviApp) -> None:
    for widget in app.screen.query("TextArea, Input"):
        widget.cursor_blink = False  # type: ignore[attr-defined]


async def settled(pilot: Any) -> None:
    app = pilot.app
    await until(pilot, lambda: app.status.memories is not None)
    still(app)


async def chatted(pilot: Any) -> None:
    """One exchange, so that there is a session to rename or delete."""
    app = pilot.app
    await settled(pilot)
    await pilot.press(*"plan my trip", "enter")

    def done() -> bool:
        views = list(app.screen.query(MessageView))
        return len(views) == 2 and app.screen.reply is None and bool(views[-1].text)

    await until(pilot, done)
    if not app.screen.incognito:
        await until(pilot, lambda: app.screen.sessions.title_of(app.screen.session_id))


async def in_memory(pilot: Any, tab: str = "facts") -> InspectorScreen:
    app = pilot.app
    await settled(pilot)
    await pilot.press("f3")
    await until(pilot, lambda: isinstance(app.screen, InspectorScreen))
    screen = app.screen
    if tab != "facts":
        await pilot.press("2")
    await until(pilot, lambda: screen.tab.id == tab and screen.current is not None)
    await until(pilot, lambda: screen.history_of is not None)
    return screen


async def dialog(pilot: Any, *keys: str) -> None:
    await pilot.press(*keys)
    await until(pilot, lambda: isinstance(pilot.app.screen, Dialog))
    await pilot.pause(0.2)
    still(pilot.app)


def snap(snap_compare: Any, daemon: ThreadedDaemon, run_before: Any, size: Any, **kw: Any) -> Any:
    app = NaviApp(daemon.paths, autostart=False, **kw)
    return snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", [SMALL, SIZE], ids=["80x24", "110x34"])
def test_forget(snap_compare: Any, running: ThreadedDaemon, size: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await in_memory(pilot)
        await dialog(pilot, "f")

    assert snap(snap_compare, running, run_before, size)


def test_edit(snap_compare: Any, running: ThreadedDaemon) -> None:
    async def run_before(pilot: Any) -> None:
        await in_memory(pilot)
        await dialog(pilot, "e")

    assert snap(snap_compare, running, run_before, SMALL)


def test_reject(snap_compare: Any, running: ThreadedDaemon) -> None:
    async def run_before(pilot: Any) -> None:
        await in_memory(pilot, "inbox")
        await dialog(pilot, "x")

    assert snap(snap_compare, running, run_before, SMALL)


def test_rename(snap_compare: Any, running: ThreadedDaemon) -> None:
    running.fake.script(Reply("Start with the coast road."))

    async def run_before(pilot: Any) -> None:
        await chatted(pilot)
        await dialog(pilot, "f7")

    assert snap(snap_compare, running, run_before, SMALL)


def test_delete(snap_compare: Any, running: ThreadedDaemon) -> None:
    running.fake.script(Reply("Start with the coast road."))

    async def run_before(pilot: Any) -> None:
        await chatted(pilot)
        await dialog(pilot, "f8")

    assert snap(snap_compare, running, run_before, SIZE)


def test_leave_incognito(snap_compare: Any, running: ThreadedDaemon) -> None:
    running.fake.script(Reply("Nothing of this is kept."))

    async def run_before(pilot: Any) -> None:
        await chatted(pilot)
        await dialog(pilot, "ctrl+o")

    assert snap(snap_compare, running, run_before, SMALL, incognito=True)


@pytest.mark.parametrize("size", [SMALL, SIZE], ids=["80x24", "110x34"])
def test_keys_panel(snap_compare: Any, running: ThreadedDaemon, size: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await settled(pilot)
        await pilot.press("f1")
        await until(pilot, lambda: isinstance(pilot.app.screen, KeysScreen))
        await pilot.pause(0.2)

    assert snap(snap_compare, running, run_before, size)


def test_chat_at_80x24(snap_compare: Any, running: ThreadedDaemon) -> None:
    running.fake.script(Reply("Start with the **coast road**, then turn inland at Aveiro."))

    async def run_before(pilot: Any) -> None:
        await chatted(pilot)
        await pilot.pause(0.2)

    assert snap(snap_compare, running, run_before, SMALL)


def test_memory_at_80x24(snap_compare: Any, running: ThreadedDaemon) -> None:
    async def run_before(pilot: Any) -> None:
        await in_memory(pilot)
        await pilot.pause(0.2)

    assert snap(snap_compare, running, run_before, SMALL)


def test_settings_at_80x24(snap_compare: Any, running: ThreadedDaemon) -> None:
    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await settled(pilot)
        await pilot.press("f4")
        await until(pilot, lambda: isinstance(app.screen, SettingsScreen) and app.screen.loaded)
        await pilot.pause(0.5)
        still(app)

    assert snap(snap_compare, running, run_before, SMALL)
