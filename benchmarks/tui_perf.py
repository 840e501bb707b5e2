"""The app's start-up and its responsiveness while a long reply streams.

    python benchmarks/tui_perf.py [--runs 10] [--tokens 5000] [--rate 200] [--changes-per-s 5]
        [--front chat|inspector] [--same-loop] [--replies 1] [--only start|streaming] [--json OUT]

1. First frame: spawns ``navi`` (the installed script) in a pseudo-terminal of 110x34 with
   a daemon already up (``navi daemon start``, fake Ollama of ``tests/fake_ollama.py``) and
   times from spawn until the terminal receives the first painted frame (the sessions
   pane's "Search sessions" placeholder); then sends Ctrl+Q. p50 / max over ``--runs``
   starts after one warm-up (page cache). Goal: <= 0.5 s. Bytecode is cached as on a user's
   machine, unless ``--no-bytecode-cache`` (every start compiles the app from source).
2. Streaming: the real app (headless, Pilot), the memory inspector opened once (it hears
   every change) and the chat in front (``--front inspector``: the inspector, the reply
   streaming behind it). The fake Ollama streams ``--tokens`` tokens (a chunk each, a
   paragraph every 25) at ``--rate`` tokens/s on a fixed clock into one reply while another
   client writes ``--changes-per-s`` memories a second (300 are there before). The daemon
   and the fake Ollama run in a process of their own, as for a user (``--same-loop``: on the
   app's loop, as the first version of this benchmark ran them). A probe measures event-loop
   lag every 10 ms (how late a timer fires). Meanwhile keys ("x", then Backspace) come from a
   thread at random moments, every 50-150 ms, as the terminal driver's do (``Keys``), each
   timed until the prompt has it (``key_ms``) and until a frame shows it (``key_drawn_ms``).
   p50 / p99 / max; ``end_lag_ms_max``: while the reply gets its last update;
   ``after_lag_ms_max``: the 2 s after (a garbage collection), and ``after_lag_ms_each`` for
   each of ``--replies`` long replies asked for one after another; ``cpu_ms_per_s``: the
   app's thread's CPU time a second while replies stream (a steadier figure than the lag's
   tail on a shared machine, the probe's own share included). The run fails if the reply
   shown is not exactly the streamed text. Goals: lag p99 <= 33 ms, key p99 <= 16 ms.
   (Until Navi's typing-first drawing the key was sent just after a lag probe, from the loop,
   and timed by a task polling the prompt: its wait had a rhythm of the probe's timer.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pty
import random
import select
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from fcntl import ioctl
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from navi_desktop.daemon.client import DaemonClient  # noqa: E402
from navi_desktop.daemon.main import socket_path  # noqa: E402
from navi_desktop.paths import Paths  # noqa: E402
from tests import fake_ollama  # noqa: E402
from tests.fake_ollama import FakeOllama, Reply, ThreadedFakeOllama  # noqa: E402
from tests.pipeline_helpers import MODELS, extraction  # noqa: E402
from tests.tui_support import Daemon, make_home  # noqa: E402

MARK = b"Search sessions"


def pct(values: list[float], p: float) -> float:
    if not values:  # a stream too short to probe
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def navi_command() -> list[str]:
    script = Path(sys.executable).with_name("navi")
    return [str(script)] if script.exists() else [sys.executable, "-m", "navi_desktop"]


def first_frame(environ: dict[str, str], timeout: float = 10.0) -> float:
    pid, fd = pty.fork()
    if pid == 0:  # the child: the app in a terminal of its own
        os.execvpe(navi_command()[0], navi_command(), environ)
    t0 = time.perf_counter()
    ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 34, 110, 0, 0))
    seen = b""
    elapsed = float("nan")
    while time.perf_counter() - t0 < timeout:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:
                break
            if MARK in seen:
                elapsed = time.perf_counter() - t0
                break
    os.write(fd, b"\x11")  # Ctrl+Q
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        select.select([fd], [], [], 0.05)
        with contextlib.suppress(OSError):
            os.read(fd, 65536)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    os.close(fd)
    return elapsed


def start_up(runs: int, bytecode_cache: bool = True) -> dict[str, Any]:
    fake = ThreadedFakeOllama(MODELS).start()
    home = Path(tempfile.mkdtemp(prefix="navi-tui-bench-"))
    try:
        paths = make_home(home, fake.url)
        environ = {**os.environ, "NAVI_HOME": str(paths.config.parent), "TERM": "xterm-256color"}
        environ.pop("NO_COLOR", None)
        if bytecode_cache:
            environ.pop("PYTHONDONTWRITEBYTECODE", None)
        else:
            environ["PYTHONDONTWRITEBYTECODE"] = "1"
            for cache in (ROOT / "navi_desktop").rglob("__pycache__"):
                shutil.rmtree(cache)
        subprocess.run([*navi_command(), "daemon", "start"], env=environ, check=True)
        first_frame(environ)  # warm the page cache
        times = [first_frame(environ) for _ in range(runs)]
        subprocess.run([*navi_command(), "daemon", "stop"], env=environ, capture_output=True)
    finally:
        fake.stop()
        shutil.rmtree(home, ignore_errors=True)
    return {
        "first_frame_s_p50": round(statistics.median(times), 3),
        "first_frame_s_max": round(max(times), 3),
        "runs": runs,
        "bytecode_cache": bytecode_cache,
    }


SEED_FACTS = 300  # what the inspector lists: a user of some months
CATEGORIES = ("profile", "preferences", "technical", "projects", "other")


def reply_words(tokens: int) -> list[str]:
    """The streamed reply, one chunk per token: words, with a paragraph every 25."""
    words = [f"word{i % 97} " for i in range(tokens)]
    words[::25] = [w.rstrip() + ".\n\n" for w in words[::25]]  # paragraphs, as replies have
    return words


def fact(n: int) -> dict[str, Any]:
    category = CATEGORIES[n % len(CATEGORIES)]
    return {
        "args": [f"fact number {n}: the user mentioned thing {n % 37} about topic {n % 11}"],
        "kwargs": {"category": category, "subject": "user", "key": f"thing {n}"},
    }


class PacedReply(Reply):
    """A reply whose chunks leave on a fixed clock (the nth at start + n / rate) rather than
    after a fixed pause each, so what a send costs cannot slow the stream below the rate."""

    def __init__(self, chunks: list[str], rate: float) -> None:
        super().__init__("".join(chunks), chunks=chunks)
        self.rate = rate
        self._due: float | None = None

    @property  # type: ignore[override]
    def delay(self) -> float:  # the fake reads it once before each chunk
        now = time.perf_counter()
        self._due = now if self._due is None else self._due + 1 / self.rate
        return max(0.0, self._due - now)

    @delay.setter
    def delay(self, value: float) -> None:  # the dataclass's own field: the clock replaces it
        pass


class Backend:
    """The fake Ollama, the daemon and, while the reply streams, another client writing a
    memory ``changes_per_s`` times a second (each a ``memory.changed`` notice to the app)."""

    def __init__(self, home: Path, tokens: int, rate: float, changes_per_s: float) -> None:
        self.home = home
        self.words = reply_words(tokens)
        self.rate = rate
        self.changes_per_s = changes_per_s
        self.changes = 0
        self.streaming = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    async def start(self) -> Paths:
        # A model with a context that holds the whole reply: the fake would stop it at 4,096.
        fake_ollama.cap_reply = lambda reply, limit: reply
        self.fake = await FakeOllama(MODELS).start()
        self.fake.default_reply = self._reply
        self.paths = make_home(self.home, self.fake.url)
        self.daemon = await Daemon(self.paths).start()
        async with await DaemonClient.connect(socket_path(self.paths)) as client:
            for n in range(SEED_FACTS):
                await client.call("memory.add", {"profile": "tester", **fact(n)})
        if self.changes_per_s > 0:
            self._writer = asyncio.ensure_future(self._write_memories())
        return self.paths

    def _reply(self, body: dict[str, Any]) -> Reply:
        """Every streamed chat turn gets the long reply; a structured request (a session
        end's extraction) learns nothing."""
        if body.get("format") or not body.get("stream", True):
            return extraction()
        self.streaming.set()
        return PacedReply(self.words, self.rate)

    async def _write_memories(self) -> None:
        await self.streaming.wait()
        loop = asyncio.get_running_loop()
        async with await DaemonClient.connect(socket_path(self.paths)) as client:
            t0 = loop.time()
            while True:
                await client.call(
                    "memory.add", {"profile": "tester", **fact(SEED_FACTS + self.changes)}
                )
                self.changes += 1
                await asyncio.sleep(max(0.0, t0 + self.changes / self.changes_per_s - loop.time()))

    async def stop(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(BaseException):
                await self._writer
        await self.daemon.stop()
        await self.fake.stop()


async def serve_backend(home: Path, tokens: int, rate: float, changes_per_s: float) -> None:
    """``--serve``: the backend in a process of its own, as Ollama and the daemon are for a
    user. Says "ready" on stdout, stops at a line on stdin, then prints what it wrote."""
    backend = Backend(home, tokens, rate, changes_per_s)
    await backend.start()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await backend.stop()
    print(json.dumps({"changes": backend.changes}), flush=True)


@contextlib.asynccontextmanager
async def backend_for(
    home: Path, tokens: int, rate: float, changes_per_s: float, same_loop: bool
) -> AsyncIterator[tuple[Paths, dict[str, int]]]:
    """The backend, on the app's own loop (``same_loop``: as the first version of this
    benchmark ran it) or in another process; yields the paths and, once stopped, its counts."""
    counts: dict[str, int] = {}
    if same_loop:
        backend = Backend(home, tokens, rate, changes_per_s)
        try:
            yield await backend.start(), counts
        finally:
            await backend.stop()
            counts["changes"] = backend.changes
        return
    argv = [__file__, "--serve", str(home), "--tokens", str(tokens), "--rate", str(rate)]
    argv += ["--changes-per-s", str(changes_per_s)]
    pipe = subprocess.PIPE
    child = await asyncio.create_subprocess_exec(sys.executable, *argv, stdin=pipe, stdout=pipe)
    assert child.stdin is not None and child.stdout is not None
    try:
        if (await child.stdout.readline()).strip() != b"ready":
            raise SystemExit("tui_perf: the daemon process did not start (see above)")
        yield Paths.from_env({"NAVI_HOME": str(home / "home")}), counts
    finally:
        child.stdin.write(b"stop\n")
        await child.stdin.drain()
        out, _ = await child.communicate()
        counts.update(json.loads(out.decode().strip().splitlines()[-1] or "{}"))


class Keys:
    """Key presses while a reply streams, sent as the terminal driver sends them: from a
    thread, at random moments (every 50-150 ms), so they fall anywhere in the app's frames.
    Each is timed from the moment it was due, until the prompt's handler has run (the
    prompt's message loop signals after each message) and until a frame shows it. One key is
    in flight at a time: "x", then Backspace."""

    def __init__(self, app: Any, prompt: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.app, self.prompt, self.loop = app, prompt, loop
        self.handled: list[float] = []
        self.drawn: list[float] = []
        self._at: dict[str, float] = {}
        self._before = ""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._type, daemon=True)
        self._display = app._display

    def start(self) -> None:
        self.prompt.message_signal.subscribe(self.prompt, self._on_message, immediate=True)
        self.app._display = self._on_display
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self.prompt.message_signal.unsubscribe(self.prompt)
        self.app._display = self._display

    def _type(self) -> None:  # the thread
        rng = random.Random(7)
        due = time.perf_counter()
        while not self._done.is_set():
            due += rng.uniform(0.05, 0.15)
            # Due at ``due`` whether or not this thread gets the GIL then: that wait is the
            # app's too (the driver's thread waits for it as this one does).
            self._done.wait(max(0.0, due - time.perf_counter()))
            if not self._done.is_set():
                self.loop.call_soon_threadsafe(self._send, due)

    def _send(self, due: float) -> None:
        if self._at and "drawn" not in self._at:
            return  # the last one is still on its way: this press is skipped
        from textual import events

        self._before = self.prompt.text
        key = events.Key("backspace", None) if self._before else events.Key("x", "x")
        self._at = {"sent": due}
        self.app.post_message(key.set_sender(self.app))

    def _on_message(self, _message: object) -> None:
        at = self._at
        if at and "handled" not in at and self.prompt.text != self._before:
            at["handled"] = time.perf_counter()
            self.handled.append((at["handled"] - at["sent"]) * 1000)

    def _on_display(self, screen: Any, update: Any) -> None:
        shown = update is not None and not self.app._batch_count  # else Textual drops it
        self._display(screen, update)
        at = self._at
        if shown and "handled" in at and "drawn" not in at:
            at["drawn"] = time.perf_counter()
            self.drawn.append((at["drawn"] - at["sent"]) * 1000)


@dataclass
class Probes:
    """What one streaming run measured, in ms."""

    lags: list[float] = field(default_factory=list)  # while replies stream
    keys: list[float] = field(default_factory=list)  # until the prompt has the key
    keys_drawn: list[float] = field(default_factory=list)  # until a frame shows it
    end_lags: list[float] = field(default_factory=list)  # while a reply gets its last update
    after_lags: list[float] = field(default_factory=list)  # the worst in the 2 s after each
    cpu_s: float = 0.0  # the app's thread's CPU time while replies stream

    async def probe(self, into: list[float]) -> None:
        """How late a 10 ms timer fires: what a key press would wait."""
        t0 = time.perf_counter()
        await asyncio.sleep(0.01)
        into.append((time.perf_counter() - t0 - 0.01) * 1000)

    async def reply(self, app: Any, pilot: Any, front: str, tokens: int) -> float:
        """Ask for one reply and probe while it streams and after; returns its streaming time."""
        from textual import events

        from navi_desktop.tui.chat.messages import MessageView

        await pilot.press("f2")  # the chat in front (from the inspector, after a reply behind it)
        chat = app.screen
        prompt = chat.prompt
        prompt.clear()
        await pilot.press(*"write a lot")
        # Not Pilot.press: it returns when the app is idle, well into the stream.
        app.post_message(events.Key("enter", "\r").set_sender(app))
        while chat.reply is None:
            await asyncio.sleep(0.001)
        if front == "inspector":  # the reply streams behind it
            app.post_message(events.Key("f3", None).set_sender(app))
        keys = Keys(app, prompt, asyncio.get_running_loop()) if front == "chat" else None
        t_start, cpu_start = time.perf_counter(), time.thread_time()
        if keys is not None:
            keys.start()
        try:
            while chat.reply is not None:
                await self.probe(self.lags)
        finally:
            if keys is not None:
                keys.stop()
                self.keys += keys.handled
                self.keys_drawn += keys.drawn
        elapsed = time.perf_counter() - t_start
        self.cpu_s += time.thread_time() - cpu_start
        # The reply's last step (its final Markdown update) is a frame too.
        while any(w.group == "reply" and not w.is_finished for w in app.workers):
            await self.probe(self.end_lags)
        t_end = time.perf_counter()
        after: list[float] = []
        while time.perf_counter() - t_end < 2.0:  # what follows the reply (a collection)
            await self.probe(after)
        self.after_lags.append(max(after))
        shown = chat.query(MessageView).last()
        streamed = "".join(reply_words(tokens))
        if shown.text != streamed or shown.source != streamed:
            raise SystemExit("tui_perf: the reply on screen is not the streamed text")
        return elapsed


async def streaming(
    tokens: int,
    rate: float,
    changes_per_s: float = 5.0,
    same_loop: bool = False,
    front: str = "chat",
    replies: int = 1,
) -> dict[str, Any]:
    from navi_desktop.tui.app import NaviApp

    home = Path(tempfile.mkdtemp(prefix="navi-tui-bench-"))
    probes = Probes()
    load = os.getloadavg()[0]
    elapsed = 0.0
    try:
        async with backend_for(home, tokens, rate, changes_per_s, same_loop) as (paths, counts):
            app = NaviApp(paths, autostart=False)
            async with app.run_test(size=(110, 34)) as pilot:
                while app.status.memories is None:
                    await pilot.pause(0.05)
                # The inspector open on the other screen: it hears every memory.changed.
                await pilot.press("f3")
                while not app.screen.memory_list.memories:
                    await pilot.pause(0.05)
                await pilot.press("f2")
                for _ in range(replies):
                    elapsed += await probes.reply(app, pilot, front, tokens)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    lags, keys = probes.lags, probes.keys
    return {
        "tokens": tokens,
        "replies": replies,
        "rate_tokens_per_s": rate,
        "stream_s": round(elapsed, 2),
        "memory_changes": counts.get("changes", 0),
        "backend": "same loop" if same_loop else "own process",
        "front": front,
        "load_avg_1m": round(load, 2),
        "cpu_ms_per_s": round(1000 * probes.cpu_s / elapsed, 1) if elapsed else None,
        "loop_lag_ms_p50": round(pct(lags, 50), 2),
        "loop_lag_ms_p99": round(pct(lags, 99), 2),
        "loop_lag_ms_max": round(max(lags), 2),
        "key_ms_p50": round(pct(keys, 50), 2) if keys else None,
        "key_ms_p99": round(pct(keys, 99), 2) if keys else None,
        "key_ms_max": round(max(keys), 2) if keys else None,
        "key_drawn_ms_p50": round(pct(probes.keys_drawn, 50), 2) if keys else None,
        "key_drawn_ms_p99": round(pct(probes.keys_drawn, 99), 2) if keys else None,
        "end_lag_ms_max": round(max(probes.end_lags, default=0.0), 2),
        "after_lag_ms_max": round(max(probes.after_lags), 2),
        "after_lag_ms_each": [round(v, 1) for v in probes.after_lags],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument(
        "--changes-per-s", type=float, default=5.0, help="memory writes a second while streaming"
    )
    parser.add_argument(
        "--same-loop", action="store_true", help="daemon and fake Ollama on the app's own loop"
    )
    parser.add_argument(
        "--front", choices=("chat", "inspector"), default="chat", help="the screen in front"
    )
    parser.add_argument("--replies", type=int, default=1, help="long replies, one after another")
    parser.add_argument("--only", choices=("start", "streaming"))
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--no-bytecode-cache", action="store_true", help="compile the app from source each start"
    )
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replies < 1:
        parser.error("--replies must be at least 1")
    if args.serve:
        asyncio.run(serve_backend(args.serve, args.tokens, args.rate, args.changes_per_s))
        return
    result: dict[str, Any] = {}
    if args.only != "streaming":
        result["start"] = start_up(args.runs, bytecode_cache=not args.no_bytecode_cache)
    if args.only != "start":
        result["streaming"] = asyncio.run(
            streaming(
                args.tokens,
                args.rate,
                args.changes_per_s,
                args.same_loop,
                args.front,
                args.replies,
            )
        )
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
