"""A burst of keys (a fast typist, tmux send-keys) is applied in order: "teacup", six
Backspaces and "Bruno" sent at once leave "Bruno", in the prompt and in the session search
box, with and without a reply streaming. Textual alone gets "teacu" (its bindings run after
the letters typed behind them: benchmarks/textual_key_order.py); Navi's fields run their
own bindings in order (tui/widgets/ordered.py).

Pilot's ``press`` waits for each key to be handled; a terminal's keys come in one read, and
Textual's input thread posts their events at once. So these tests post the events at once,
and the pty test sends the bytes through a real pseudo-terminal.

They wait for a marker key, not for the app to be idle: a streaming reply keeps the process
busy, and ``pilot.pause()`` then waits its full second each time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from textual import events

from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.chat.prompt import Prompt
from tests.fake_ollama import Reply
from tests.tui_support import SIZE, Daemon, make_home, until

RUNS = 50
WORD, BURST, RESULT = "teacup", "\x7f" * 6 + "Bruno", "Bruno"


MARK = "f24"  # bound only by Marked: it is handled last, after every key posted before it


class Marked(NaviApp):
    """Counts the marker key. A key that no widget takes bubbles from the focused field up to
    the app, through the same queues, in order, as the keys posted before it: when the app
    runs its binding, every one of them (a Backspace's binding included) has been handled."""

    BINDINGS = [(MARK, "mark", "mark")]
    marks = 0

    def action_mark(self) -> None:
        self.marks += 1


def post_burst(app: NaviApp, text: str) -> None:
    """The events of one read from the terminal, posted at once as the input thread does."""
    for char in text:
        key = "backspace" if char == "\x7f" else char
        app.post_message(events.Key(key, char))


async def ready(app: NaviApp, pilot: Any) -> None:
    await until(pilot, lambda: app.status.memories is not None)


async def bursts_into(app: Marked, pilot: Any, field: Any) -> list[str]:
    results = []
    for run in range(1, RUNS + 1):
        field.focus()
        field.set(WORD)
        post_burst(app, BURST)
        app.post_message(events.Key(MARK, None))
        await until(pilot, lambda run=run: app.marks == run, 5)  # type: ignore[misc]
        results.append(field.text)
        field.clear()
    return results


@pytest.mark.parametrize("streaming", [False, True], ids=["idle", "while-a-reply-streams"])
async def test_a_burst_in_the_prompt_keeps_its_order(fake, daemon, streaming) -> None:
    app = Marked(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        prompt = PromptText(app.screen.query_one(Prompt))
        if streaming:  # deltas keep coming (50 a second) through all the bursts
            fake.script(Reply(chunks=["w "] * 8000, delay=0.02))
            await pilot.press(*"tell me a long story", "enter")
            await until(pilot, lambda: app.screen.reply is not None and app.screen.reply.text)
        results = await bursts_into(app, pilot, prompt)
        if streaming:
            assert app.screen.reply is not None  # it was streaming all along
            await pilot.press("escape")
    assert results == [RESULT] * RUNS


class PromptText:
    def __init__(self, field: Any) -> None:
        self.field = field

    @property
    def text(self) -> str:
        return self.field.text

    def focus(self) -> None:
        self.field.focus()

    def set(self, text: str) -> None:
        self.field.load_text(text)
        self.field.move_cursor(self.field.document.end)

    def clear(self) -> None:
        self.field.clear()


class SearchText(PromptText):
    """The session search Input, read and set like the prompt."""

    @property
    def text(self) -> str:
        return self.field.value

    def set(self, text: str) -> None:
        self.field.value = text
        self.field.cursor_position = len(text)

    def clear(self) -> None:
        self.field.value = ""


async def test_a_burst_in_the_session_search_keeps_its_order(fake, daemon) -> None:
    app = Marked(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press(*"hello", "enter")  # a session with history to search
        await until(pilot, lambda: app.screen.reply is None and app.screen.session_id)
        field = SearchText(app.screen.query_one("#session-search"))
        results = await bursts_into(app, pilot, field)
    assert results == [RESULT] * RUNS


# -- through a real terminal -----------------------------------------------------------------

CHILD = """
import sys
from navi_desktop.paths import Paths
from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.chat.prompt import Prompt

class Recorded(NaviApp):
    # Ctrl+S writes the prompt's text as a line to the file, then clears the prompt.
    BINDINGS = [("ctrl+s", "record", "record")]

    def action_record(self):
        prompt = self.screen.query_one(Prompt)
        with open(sys.argv[1], "a") as out:
            out.write(prompt.text.replace("\\n", "|") + "\\n")
        prompt.clear()

Recorded(Paths.from_env(), autostart=False).run()
"""


def test_a_burst_through_a_pseudo_terminal_keeps_its_order(tmp_path: Path, fake_thread) -> None:
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time

    paths = make_home(tmp_path, fake_thread.url)
    out = tmp_path / "typed.txt"
    loop = asyncio.new_event_loop()
    daemon = loop.run_until_complete(Daemon(paths).start())
    import threading

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    pid, fd = pty.fork()
    if pid == 0:  # the app, in the terminal
        env = {**os.environ, "TERM": "xterm-256color", "NAVI_HOME": str(tmp_path / "home")}
        os.execve(sys.executable, [sys.executable, "-c", CHILD, str(out)], env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 34, 110, 0, 0))

    def drain(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if select.select([fd], [], [], 0.02)[0]:
                try:
                    os.read(fd, 65536)
                except OSError:
                    return

    def recorded() -> list[str]:
        return out.read_text().splitlines() if out.exists() else []

    try:
        drain(3.0)
        for n in range(RUNS):
            os.write(fd, WORD.encode())
            drain(0.05)
            os.write(fd, BURST.encode())  # one write: one read in the app
            drain(0.05)
            os.write(fd, b"\x13")  # Ctrl+S: record and clear
            deadline = time.monotonic() + 10
            while len(recorded()) <= n and time.monotonic() < deadline:
                drain(0.05)
        os.write(fd, b"\x11")  # Ctrl+Q
        drain(1.0)
    finally:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        asyncio.run_coroutine_threadsafe(daemon.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    assert recorded() == [RESULT] * RUNS


@pytest.fixture
def fake_thread():
    from tests.fake_ollama import ThreadedFakeOllama
    from tests.pipeline_helpers import MODELS

    with ThreadedFakeOllama(MODELS) as server:
        yield server
