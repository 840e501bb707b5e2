"""Snapshots of the chat: streaming, after the reply, incognito, and Ollama down.

``snap_compare`` runs the app on its own loop, so the daemon and the fake Ollama run in
threads here. The fake listens on a fixed port because the status line shows the host."""

from __future__ import annotations

import pytest

from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.chat.messages import MessageView
from tests.fake_ollama import Reply
from tests.tui_support import SIZE, snapshot_daemon, until

PORT = 27811
STREAMED = ["Here is ", "a **plan**:\n\n", "1. Pack\n", "2. Travel\n\n", "```sh\n", "echo hi\n"]


@pytest.fixture
def running(tmp_path):
    with snapshot_daemon(tmp_path, PORT) as daemon:
        yield daemon


def still(app: NaviApp) -> None:
    for widget in app.screen.query("TextArea, Input"):
        widget.cursor_blink = False  # type: ignore[attr-defined]


async def settled(app: NaviApp, pilot) -> None:
    await until(pilot, lambda: app.status.memories is not None)
    still(app)


def replied(app: NaviApp, text: str):
    def check() -> bool:
        views = list(app.screen.query(MessageView))
        return bool(views) and views[-1].role == "assistant" and text in views[-1].text

    return check


async def ask(app: NaviApp, pilot, text: str, answer: str, *, finished: bool = True) -> None:
    """Send ``text`` once the app is up; wait for ``answer`` in the reply (and its end)."""
    await settled(app, pilot)
    await pilot.press(*text, "enter")
    shown = replied(app, answer)
    await until(pilot, (lambda: shown() and app.screen.reply is None) if finished else shown)


def test_chat_while_streaming(snap_compare, running):
    running.fake.script(Reply(chunks=STREAMED, hang=True))  # the fence is still open mid-stream
    app = NaviApp(running.paths, autostart=False)

    async def run_before(pilot) -> None:
        await ask(app, pilot, "plan my trip", "echo hi", finished=False)
        await pilot.pause(0.3)  # the Markdown stream paints in batches

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_chat_after_the_reply(snap_compare, running):
    running.fake.script(Reply("".join(STREAMED) + "```\n\nHave a good trip!"))
    app = NaviApp(running.paths, autostart=False)

    async def run_before(pilot) -> None:
        await ask(app, pilot, "plan my trip", "good trip")
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_incognito(snap_compare, running):
    running.fake.script(Reply("Nothing of this is kept."))
    app = NaviApp(running.paths, autostart=False, incognito=True)

    async def run_before(pilot) -> None:
        await ask(app, pilot, "just between us", "kept")
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_ollama_down_banner(snap_compare, tmp_path):
    with snapshot_daemon(tmp_path, None) as daemon:
        app = NaviApp(daemon.paths, autostart=False)

        async def run_before(pilot) -> None:
            await settled(app, pilot)
            await until(pilot, lambda: app.status.ollama_reachable is False)
            await pilot.pause(0.1)

        assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
