"""The app's start-up and its responsiveness while a long reply streams.

    python benchmarks/tui_perf.py [--runs 10] [--tokens 2000] [--rate 200] [--json OUT]

1. First frame: spawns ``navi`` (the installed script) in a pseudo-terminal of 110x34 with
   a daemon already up (``navi daemon start``, fake Ollama of ``tests/fake_ollama.py``) and
   times from spawn until the terminal receives the first painted frame (the sessions
   pane's "Search sessions" placeholder, drawn in the first frame); then sends Ctrl+Q.
   p50 / max over ``--runs`` starts after one warm-up (page cache). Goal: <= 0.5 s.
   Python caches compiled bytecode as on a user's machine: the warm-up writes it even where
   PYTHONDONTWRITEBYTECODE is set, unless ``--no-bytecode-cache`` (every start then
   compiles the app's modules from source).
2. Streaming: the real app (headless, Pilot) against a daemon on the same loop, while the
   fake Ollama streams ``--tokens`` tokens at ``--rate`` tokens/s into one reply. A probe
   measures event-loop lag every 10 ms (how late a timer fires: what a key press would
   wait) and how long a key press takes to appear in the prompt. p50 / p99 / max.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pty
import select
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from fcntl import ioctl
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fake_ollama import FakeOllama, Reply, ThreadedFakeOllama  # noqa: E402
from tests.pipeline_helpers import MODELS  # noqa: E402
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


async def streaming(tokens: int, rate: float) -> dict[str, Any]:
    from textual import events

    from navi_desktop.tui.app import NaviApp

    words = [f"word{i % 97} " for i in range(tokens)]
    words[::25] = [w.rstrip() + ".\n\n" for w in words[::25]]  # paragraphs, as replies have
    home = Path(tempfile.mkdtemp(prefix="navi-tui-bench-"))
    lags: list[float] = []
    keys: list[float] = []
    async with FakeOllama(MODELS) as fake:
        fake.script(Reply(chunks=words, delay=1 / rate))
        daemon = await Daemon(make_home(home, fake.url)).start()
        app = NaviApp(daemon.paths, autostart=False)
        try:
            async with app.run_test(size=(110, 34)) as pilot:
                while app.status.memories is None:
                    await pilot.pause(0.05)
                await pilot.press(*"write a lot", "enter")
                while app.screen.reply is None:
                    await pilot.pause(0.01)
                prompt = app.screen.query_one("#prompt")
                t_start = time.perf_counter()
                while app.screen.reply is not None:
                    t0 = time.perf_counter()
                    await asyncio.sleep(0.01)
                    lags.append((time.perf_counter() - t0 - 0.01) * 1000)
                    if len(lags) % 20 == 0:  # a key press while the reply streams
                        before = prompt.text
                        t1 = time.perf_counter()
                        # Straight into the queue: Pilot.press would wait for an idle app.
                        prompt.post_message(events.Key("x", "x"))
                        while prompt.text == before:
                            await asyncio.sleep(0)
                        keys.append((time.perf_counter() - t1) * 1000)
                elapsed = time.perf_counter() - t_start
        finally:
            await daemon.stop()
            shutil.rmtree(home, ignore_errors=True)
    return {
        "tokens": tokens,
        "rate_tokens_per_s": rate,
        "stream_s": round(elapsed, 2),
        "loop_lag_ms_p50": round(pct(lags, 50), 2),
        "loop_lag_ms_p99": round(pct(lags, 99), 2),
        "loop_lag_ms_max": round(max(lags), 2),
        "key_ms_p50": round(pct(keys, 50), 2),
        "key_ms_max": round(max(keys), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--no-bytecode-cache", action="store_true", help="compile the app from source each start"
    )
    args = parser.parse_args()
    result = {
        "start": start_up(args.runs, bytecode_cache=not args.no_bytecode_cache),
        "streaming": asyncio.run(streaming(args.tokens, args.rate)),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
