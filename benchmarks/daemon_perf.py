"""Daemon performance: a real ``navi daemon`` subprocess, the fake Ollama on loopback.

    python benchmarks/daemon_perf.py [--memories 10000] [--turns 50] [--pings 2000]
                                     [--cold-runs 10] [--json OUT]

In a throw-away NAVI_HOME (``[memory] embedder = "none"``):

1. Builds a profile of N synthetic facts in-process (``MemoryStore.add_memories`` in
   batches of 1000, the generator of ``search_scale.py``), then starts the daemon on it
   (``navi daemon start``) with ``OLLAMA_HOST`` pointing at the threaded fake Ollama of
   ``tests/fake_ollama.py``, whose chat replies are one short sentence with no delay.
2. Idle RSS: ``VmRSS`` of the daemon after start, a few requests and 2 s of idling; again
   after the chat turns below.
3. No-op round trip: ``rpc.ping`` calls one after another on one connection
   (``DaemonClient``), after 200 warm-up calls; p50 / p99.
4. Send to Ollama: ``chat.send`` turns in one session on the N-memory profile; for each, the
   time from just before the request is written to the daemon's socket until the fake
   Ollama has read the whole ``/api/chat`` request (its ``received_at``, same clock, same
   process). This covers the RPC, storing the user message, building the context (profile,
   rules, the search over N memories) and the HTTP request. p50 / p95.
5. ``navi chat`` cold start with the daemon up: wall time of the installed ``navi`` script
   (``navi chat hi``, a new session each run) from spawn to exit, and to the first byte on
   stdout (the first streamed delta); p50 / max.

Goals (issue 4): RTT p50 <= 1 ms; send to Ollama <= 30 ms on a 10,000-memory profile; idle
RSS <= 100 MB; chat cold start <= 300 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from search_scale import SEED, pct, synthetic_facts, synthetic_queries  # noqa: E402

from navi_desktop.daemon.client import DaemonClient  # noqa: E402
from navi_desktop.daemon.main import lock_path, socket_path  # noqa: E402
from navi_desktop.memory import MemoryStore  # noqa: E402
from navi_desktop.paths import Paths  # noqa: E402
from tests.fake_ollama import FakeModel, Reply, ThreadedFakeOllama  # noqa: E402

PROFILE = "bench"
EMPTY_EXTRACTION = json.dumps({"facts": [], "rules": [], "summary": ""})


def responder(body: dict[str, Any]) -> Reply:
    """Short chat replies; an empty (valid) extraction when a session is ended."""
    if body.get("format"):
        return Reply(EMPTY_EXTRACTION)
    return Reply("Sure, here is a short answer.")


def navi_command() -> list[str]:
    script = Path(sys.executable).with_name("navi")
    return [str(script)] if script.exists() else [sys.executable, "-m", "navi_desktop"]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def build_profile(paths: Paths, n: int) -> float:
    rng = random.Random(SEED)
    facts = synthetic_facts(n, rng)
    t0 = time.perf_counter()
    store = await MemoryStore.open(paths.profile_db(PROFILE))
    try:
        for start in range(0, n, 1000):
            await store.add_memories(facts[start : start + 1000], actor="bench")
    finally:
        await store.close()
    return time.perf_counter() - t0


async def ping_rtts(sock: Path, count: int) -> list[float]:
    async with await DaemonClient.connect(sock) as client:
        for _ in range(200):
            await client.call("rpc.ping")
        out = []
        for _ in range(count):
            t0 = time.perf_counter()
            await client.call("rpc.ping")
            out.append((time.perf_counter() - t0) * 1000)
    return out


async def send_to_ollama(
    sock: Path, fake: ThreadedFakeOllama, turns: int
) -> tuple[list[float], list[float]]:
    queries = synthetic_queries(turns + 1, random.Random(SEED + 1))
    to_ollama, whole_turn = [], []
    session_id = None
    async with await DaemonClient.connect(sock) as client:
        for i, text in enumerate(queries):
            params: dict[str, Any] = {"text": text}
            if session_id is not None:
                params["session_id"] = session_id
            seen = len(fake.fake.requests)
            t0 = time.perf_counter()
            result = await client.call("chat.send", params, timeout=60)
            t1 = time.perf_counter()
            session_id = result["session_id"]
            arrived = [
                r.received_at
                for r in fake.fake.requests[seen:]
                if r.path == "/api/chat" and not (isinstance(r.body, dict) and r.body.get("format"))
            ]
            if i == 0:
                continue  # the first turn opens the profile file and the Ollama connection
            to_ollama.append((arrived[0] - t0) * 1000)
            whole_turn.append((t1 - t0) * 1000)
    return to_ollama, whole_turn


def cold_starts(environ: dict[str, str], runs: int) -> tuple[list[float], list[float]]:
    cmd = [*navi_command(), "chat", "hi"]
    subprocess.run(cmd, env=environ, capture_output=True, check=True)  # warm the page cache
    walls, firsts = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        select.select([proc.stdout], [], [], 30)
        first = time.perf_counter()
        proc.communicate(timeout=30)
        end = time.perf_counter()
        if proc.returncode != 0:
            raise RuntimeError(f"navi chat failed with {proc.returncode}")
        walls.append((end - t0) * 1000)
        firsts.append((first - t0) * 1000)
    return walls, firsts


def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="navi-perf-"))
    fake = ThreadedFakeOllama([FakeModel("llama3.2")], default_reply=responder).start()
    home = root / "h"
    (home / "config").mkdir(parents=True)
    environ = {**os.environ, "NAVI_HOME": str(home), "OLLAMA_HOST": fake.url}
    paths = Paths.from_env(environ)
    paths.config_file.write_text(
        f'[ollama]\nchat_model = "llama3.2"\n[memory]\nembedder = "none"\nprofile = "{PROFILE}"\n'
    )
    sock = socket_path(paths)
    navi = navi_command()
    try:
        print(f"building a profile of {args.memories} memories ...", file=sys.stderr)
        build_s = asyncio.run(build_profile(paths, args.memories))
        subprocess.run([*navi, "daemon", "start"], env=environ, check=True, capture_output=True)
        pid = int(lock_path(paths).read_text())

        async def few() -> None:
            async with await DaemonClient.connect(sock) as client:
                await client.call("rpc.ping")
                await client.call("daemon.status")
                await client.call("sessions.list", {"limit": 10})

        asyncio.run(few())
        time.sleep(2)
        idle_rss = rss_mb(pid)

        print(f"rpc.ping x {args.pings} ...", file=sys.stderr)
        rtts = asyncio.run(ping_rtts(sock, args.pings))
        print(f"chat.send x {args.turns} ...", file=sys.stderr)
        to_ollama, whole = asyncio.run(send_to_ollama(sock, fake, args.turns))
        time.sleep(2)
        busy_rss = rss_mb(pid)
        print(f"navi chat x {args.cold_runs} ...", file=sys.stderr)
        walls, firsts = cold_starts(environ, args.cold_runs)
        subprocess.run([*navi, "daemon", "stop"], env=environ, capture_output=True, timeout=120)
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)

    return {
        "memories": args.memories,
        "profile_build_s": round(build_s, 1),
        "noop_rtt_ms_p50": round(statistics.median(rtts), 3),
        "noop_rtt_ms_p99": round(pct(rtts, 99), 3),
        "noop_calls": len(rtts),
        "send_to_ollama_ms_p50": round(statistics.median(to_ollama), 2),
        "send_to_ollama_ms_p95": round(pct(to_ollama, 95), 2),
        "chat_turn_ms_p50": round(statistics.median(whole), 2),
        "turns": len(to_ollama),
        "idle_rss_mb": round(idle_rss, 1),
        "idle_rss_mb_after_turns": round(busy_rss, 1),
        "chat_cold_start_ms_p50": round(statistics.median(walls), 1),
        "chat_cold_start_ms_max": round(max(walls), 1),
        "chat_first_byte_ms_p50": round(statistics.median(firsts), 1),
        "cold_runs": len(walls),
        "command": " ".join(Path(navi[0]).name if i == 0 else a for i, a in enumerate(navi)),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--pings", type=int, default=2000)
    parser.add_argument("--cold-runs", type=int, default=10)
    parser.add_argument("--json", metavar="OUT", help="also write the figures here")
    args = parser.parse_args(argv)
    r = run(args)
    goal = {True: "ok", False: "MISSED"}
    print(f"daemon on a {r['memories']}-memory profile ({r['machine']}, Python {r['python']})")
    print(
        f"  no-op round trip    p50 {r['noop_rtt_ms_p50']:.3f} ms, p99 {r['noop_rtt_ms_p99']:.3f}"
        f" ms over {r['noop_calls']} calls  [goal p50 <= 1 ms: {goal[r['noop_rtt_ms_p50'] <= 1]}]"
    )
    print(
        f"  send -> Ollama      p50 {r['send_to_ollama_ms_p50']:.1f} ms, p95"
        f" {r['send_to_ollama_ms_p95']:.1f} ms over {r['turns']} turns (whole turn p50"
        f" {r['chat_turn_ms_p50']:.1f} ms)  [goal <= 30 ms:"
        f" {goal[r['send_to_ollama_ms_p95'] <= 30]}]"
    )
    print(
        f"  idle RSS            {r['idle_rss_mb']:.1f} MB (after the turns:"
        f" {r['idle_rss_mb_after_turns']:.1f} MB)  [goal <= 100 MB:"
        f" {goal[max(r['idle_rss_mb'], r['idle_rss_mb_after_turns']) <= 100]}]"
    )
    print(
        f"  `{r['command']} chat hi`  p50 {r['chat_cold_start_ms_p50']:.0f} ms to exit (max"
        f" {r['chat_cold_start_ms_max']:.0f}), first output byte p50"
        f" {r['chat_first_byte_ms_p50']:.0f} ms over {r['cold_runs']} runs  [goal <= 300 ms:"
        f" {goal[r['chat_cold_start_ms_p50'] <= 300]}]"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2) + "\n")


if __name__ == "__main__":
    main()
