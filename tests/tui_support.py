"""A real daemon and the fake Ollama for TUI tests: on the test's own loop for Pilot tests,
or in a thread for snapshot tests (``snap_compare`` runs the app on a loop of its own)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from textual import events
from textual.css.query import NoMatches

from navi_desktop.daemon.client import DaemonClient
from navi_desktop.daemon.main import serve, socket_path
from navi_desktop.paths import Paths
from navi_desktop.tui.widgets.status_line import Banner
from tests.fake_ollama import FakeOllama, ThreadedFakeOllama
from tests.pipeline_helpers import MODELS

SNAPSHOT_PORT = 27811  # snapshots show the host: a fixed port keeps them stable
# (Snapshot ports are below Linux's ephemeral range, 32768-60999: a port in it can be taken
# by any outgoing connection on the machine.)
DEAD_HOST = "http://127.0.0.1:9"  # the discard port: nothing listens there
SIZE = (110, 34)

CONFIG = """# test settings
[ollama]
host = "{host}"
chat_model = "llama3.2"
[memory]
embedder = "none"
profile = "tester"
inactivity_timeout_min = 30
"""


def make_home(root: Path, host: str, extra: str = "") -> Paths:
    paths = Paths.from_env({"NAVI_HOME": str(root / "home")})
    paths.config.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text(CONFIG.format(host=host) + extra)
    return paths


class Daemon:
    """``serve()`` as a task on the running loop; ``stop()`` asks it to stop like a client."""

    def __init__(self, paths: Paths) -> None:
        self.paths = paths
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> Daemon:
        ready = asyncio.Event()
        self._task = asyncio.ensure_future(serve(self.paths, ready=ready))
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait([self._task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if self._task.done():
            waiter.cancel()
            self._task.result()  # raise why it did not start
        return self

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        async with await DaemonClient.connect(socket_path(self.paths)) as client:
            return await client.call(method, {"profile": "tester", **(params or {})})

    async def stop(self) -> None:
        if self._task is None or self._task.done():
            return
        with contextlib.suppress(Exception):
            await self.call("daemon.stop")
        await asyncio.wait_for(self._task, 30)


class ThreadedDaemon:
    """The daemon on its own loop in a thread, for synchronous (snapshot) tests."""

    def __init__(self, paths: Paths) -> None:
        self.paths = paths
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.daemon = Daemon(paths)
        self.fake: ThreadedFakeOllama | None = None  # set by snapshot_daemon()

    def start(self) -> ThreadedDaemon:
        self.thread.start()
        self.run(self.daemon.start())
        return self

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.run(self.daemon.call(method, params))

    def stop(self) -> None:
        self.run(self.daemon.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def tracked(obj: object) -> bool:
    """Whether full garbage collections walk ``obj`` (frozen objects are in no generation)."""
    return any(o is obj for o in gc.get_objects())


async def until(pilot: Any, condition: Callable[[], Any], timeout: float = 10.0) -> None:
    """Let the app run until ``condition()`` holds (the daemon answers on its own time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    missing: Exception | None = None  # why the condition could not be checked, last time
    while True:
        try:
            if condition():
                return
            missing = None
        except (LookupError, NoMatches) as exc:  # a widget or row not there yet (the app
            missing = exc  # rebuilds them as the daemon's answers arrive): not yet
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {condition}") from missing
        await pilot.pause(0.05)


def record_frames(app: Any, on_frame: Callable[[str], None]) -> None:
    """Hand ``on_frame`` the text of every frame ``app`` sends to the terminal. One drawn
    inside a batch is not sent (Textual drops it), so it is not handed on either."""
    display = app._display

    def drawn(on: Any, update: Any) -> None:
        if update is not None and not app._batch_count:
            on_frame(update.render_segments(app.console))
        display(on, update)

    app._display = drawn


def type_keys(app: Any, *keys: str) -> None:
    """Keys as the terminal driver posts them: not Pilot.press, which waits for the app to
    idle. A name of one character is typed as that character."""
    for name in keys:
        app.post_message(events.Key(name, name if len(name) == 1 else None).set_sender(app))


def banner(app: Any) -> str:
    """The banner's text. It is redrawn just after the status it shows arrives, so a test
    waits for its words (``until``) rather than reading it once the status is in."""
    return str(app.screen.query_one(Banner).render())


def fake_ollama(port: int = 0) -> FakeOllama:
    return FakeOllama(MODELS, port=port)


def threaded_fake_ollama(port: int = SNAPSHOT_PORT) -> ThreadedFakeOllama:
    return ThreadedFakeOllama(MODELS, port=port)


@contextlib.contextmanager
def port_held(port: int) -> Iterator[None]:
    """Hold ``port`` for this test alone: tests run in several processes (pytest-xdist), and
    two snapshot tests of one module, or two test runs, would otherwise both bind it. The
    lock is the kernel's, so it goes with a process that dies."""
    path = Path(tempfile.gettempdir()) / f"navi-tests-{os.getuid()}-port-{port}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)  # not a planted link
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def snapshot_daemon(root: Path, port: int | None) -> Iterator[ThreadedDaemon]:
    """For snapshots: the fake Ollama on a fixed port (the status line shows the host) and a
    daemon using it, both in threads. ``port=None``: Ollama down (nothing listens on 9)."""
    with port_held(port) if port else contextlib.nullcontext():
        fake = threaded_fake_ollama(port).start() if port else None
        daemon = ThreadedDaemon(make_home(root, fake.url if fake else DEAD_HOST)).start()
        daemon.fake = fake
        try:
            yield daemon
        finally:
            daemon.stop()
            if fake is not None:
                fake.stop()


def notified(app: Any, words: str) -> bool:
    """Whether a notification (still shown) holds ``words``."""
    return any(words in n.message for n in app._notifications)


def error_notes(app: Any) -> list[str]:
    return [n.message for n in app._notifications if n.severity == "error"]
