"""The daemon under abuse: how a well-behaved client fares while others misbehave.

    python benchmarks/daemon_abuse.py [--calls 300] [--idle 500] [--storm 50000] [--json OUT]

A real ``navi daemon`` in a throw-away NAVI_HOME (``[memory] embedder = "none"``), the fake
Ollama of ``tests/fake_ollama.py`` in a thread. A well-behaved client (``DaemonClient``,
one connection) times ``rpc.ping`` and ``memory.add`` calls, alternating, while:

(a) a client subscribed to ``*`` asks for large replies (``memory.export`` x 5, 1.2 MB)
    and never reads them; every ``memory.add`` broadcasts ``memory.changed`` to it too;
(b) 500 idle connections are held open (each answered one ping first);
(c) one client pipelines 50,000 ``rpc.ping`` requests without reading a reply (the storm
    runs in its own thread while the calls are timed); then it vanishes (a reset), and the
    first pings after that are timed on their own.

Reported: max and p99 latency per case; the daemon's RSS (``VmRSS``) when idle before, at
its peak, and idle after (all abusers gone, 3 s of quiet); how many of the storm's requests
the client got written (into socket buffers; the daemon stops reading a client whose
replies pile up unread); tracebacks and unretrieved task errors in the daemon's log.

Goals (issue 11): p99 <= 50 ms in every case; RSS after within 20% of before; no traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from daemon_perf import rss_mb  # noqa: E402

from navi_desktop.daemon.client import DaemonClient  # noqa: E402
from navi_desktop.daemon.main import lock_path, log_path, socket_path  # noqa: E402
from navi_desktop.paths import Paths  # noqa: E402
from tests.fake_ollama import FakeModel, ThreadedFakeOllama  # noqa: E402

CONFIG = '[ollama]\nchat_model = "llama3.2"\n[memory]\nembedder = "none"\nprofile = "bench"\n'
PING = b'{"jsonrpc":"2.0","id":1,"method":"rpc.ping"}\n'
GOAL_MS = 50.0


def cpu_s(pid: int) -> float:
    """CPU seconds the process has used (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def raw(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.fspath(path))
    return sock


def reset(sock: socket.socket) -> None:
    """Close with everything unread, as a crashed client would."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def read_frame(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        data += chunk
    return data


async def timed_calls(client: DaemonClient, calls: int, tag: str) -> dict[str, list[float]]:
    """``calls`` pings and as many memory.adds, interleaved; milliseconds each."""
    out: dict[str, list[float]] = {"rpc.ping": [], "memory.add": []}
    for i in range(calls):
        t0 = time.perf_counter()
        await client.call("rpc.ping", timeout=120)
        out["rpc.ping"].append((time.perf_counter() - t0) * 1000)
        params = {"args": [f"{tag} note {i}"], "kwargs": {"category": "preferences"}}
        t0 = time.perf_counter()
        await client.call("memory.add", params, timeout=120)
        out["memory.add"].append((time.perf_counter() - t0) * 1000)
    return out


class Storm(threading.Thread):
    """Pipelines ``count`` pings on one connection and never reads; stops when told."""

    def __init__(self, path: Path, count: int) -> None:
        super().__init__(daemon=True)
        self.sock = raw(path)
        self.sock.setblocking(False)
        self.data = PING * count
        self.sent = 0
        self.started = threading.Event()
        self.halt = threading.Event()

    def run(self) -> None:
        view = memoryview(self.data)
        while self.sent < len(self.data) and not self.halt.is_set():
            _, writable, _ = select.select([], [self.sock], [], 0.05)
            if not writable:
                self.started.set()  # the daemon holds it back: the storm is on
                continue
            try:
                self.sent += self.sock.send(view[self.sent : self.sent + 65536])
            except BlockingIOError:
                continue
            if self.sent > 256 * 1024:
                self.started.set()
        self.started.set()

    def requests_written(self) -> int:
        return self.sent // len(PING)


def summary(samples: dict[str, list[float]]) -> dict[str, Any]:
    return {
        method: {
            "n": len(values),
            "p99_ms": round(pct(values, 0.99), 2),
            "max_ms": round(max(values), 2),
        }
        for method, values in samples.items()
        if values
    }


async def run_cases(sock: Path, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with await DaemonClient.connect(sock) as client:
        for i in range(60):  # something large to export
            params = {"args": [f"tea {i} " + "x" * 4000], "kwargs": {"category": "preferences"}}
            await client.call("memory.add", params, timeout=60)
        await timed_calls(client, 100, "warm-up")
        await asyncio.sleep(2)
        results["rss_before_mb"] = round(rss_mb(pid), 1)
        peak = results["rss_before_mb"]
        results["baseline"] = summary(await timed_calls(client, args.calls, "baseline"))

        # (a) a subscriber that does not read
        stuck = raw(sock)
        stuck.sendall(
            b'{"jsonrpc":"2.0","id":1,"method":"rpc.subscribe","params":{"topics":["*"]}}\n'
        )
        read_frame(stuck)
        stuck.sendall(b'{"jsonrpc":"2.0","id":2,"method":"memory.export"}\n' * 5)
        await asyncio.sleep(2)  # the exports are done: only their unread replies remain
        results["a_stuck_subscriber"] = summary(await timed_calls(client, args.calls, "a"))
        peak = max(peak, rss_mb(pid))
        reset(stuck)

        # (b) idle connections held open
        idle = []
        for _ in range(args.idle):
            conn = raw(sock)
            conn.sendall(PING)
            read_frame(conn)
            idle.append(conn)
        results["b_idle_connections"] = summary(await timed_calls(client, args.calls, "b"))
        peak = max(peak, rss_mb(pid))
        for conn in idle:
            conn.close()

        # (c) a pipelined storm, then the storm client vanishes
        storm = Storm(sock, args.storm)
        storm.start()
        await asyncio.to_thread(storm.started.wait, 30)
        cpu, wall = cpu_s(pid), time.perf_counter()
        results["c_storm"] = summary(await timed_calls(client, args.calls, "c"))
        results["c_daemon_cpu_share"] = round((cpu_s(pid) - cpu) / (time.perf_counter() - wall), 2)
        peak = max(peak, rss_mb(pid))
        storm.halt.set()
        await asyncio.to_thread(storm.join, 30)
        results["c_storm_requests_written"] = storm.requests_written()
        reset(storm.sock)
        after_close = []
        for _ in range(20):
            t0 = time.perf_counter()
            await client.call("rpc.ping", timeout=120)
            after_close.append((time.perf_counter() - t0) * 1000)
        results["c_ping_after_storm_closed"] = summary({"rpc.ping": after_close})["rpc.ping"]

        await asyncio.sleep(3)
        await client.call("rpc.ping", timeout=60)
        results["rss_peak_mb"] = round(peak, 1)
        results["rss_after_mb"] = round(rss_mb(pid), 1)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="pings timed per case")
    parser.add_argument("--idle", type=int, default=500, help="idle connections in (b)")
    parser.add_argument("--storm", type=int, default=50_000, help="requests in the storm (c)")
    parser.add_argument("--json", metavar="OUT", help="also write the figures here")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="navi-abuse-"))
    home = root / "h"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text(CONFIG)
    fake = ThreadedFakeOllama([FakeModel("llama3.2")]).start()
    environ = {**os.environ, "NAVI_HOME": str(home), "OLLAMA_HOST": fake.url}
    paths = Paths.from_env(environ)
    navi = [sys.executable, "-m", "navi_desktop"]
    try:
        subprocess.run([*navi, "daemon", "start"], env=environ, check=True, capture_output=True)
        pid = int(lock_path(paths).read_text().strip())
        results = asyncio.run(run_cases(socket_path(paths), pid, args))
        subprocess.run([*navi, "daemon", "stop"], env=environ, capture_output=True, timeout=120)
        log = log_path(paths).read_text(errors="replace")
        results["log_tracebacks"] = log.count("Traceback")
        results["log_never_retrieved"] = log.count("never retrieved")
        results["log_dropped_peers"] = log.count("dropped:")
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
    report(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    ok = {True: "ok", False: "MISSED"}
    print(
        f"daemon under abuse ({platform.machine()}, {os.cpu_count()} CPUs,"
        f" {platform.system()}, Python {platform.python_version()})"
    )
    cases = [
        ("baseline", "no abuse"),
        ("a_stuck_subscriber", "(a) a `*` subscriber not reading"),
        ("b_idle_connections", f"(b) {args.idle} idle connections"),
        ("c_storm", f"(c) a {args.storm}-request storm"),
    ]
    for key, label in cases:
        parts = []
        for method, s in r[key].items():
            parts.append(
                f"{method} p99 {s['p99_ms']:.1f} ms, max {s['max_ms']:.1f} ms"
                f" [{ok[s['p99_ms'] <= GOAL_MS]}]"
            )
        print(f"  {label:<36} " + "; ".join(parts))
    after = r["c_ping_after_storm_closed"]
    print(f"  {'ping once the storm client vanished':<36} max {after['max_ms']:.1f} ms")
    print(f"  {'storm requests the client wrote':<36} {r['c_storm_requests_written']}")
    within = r["rss_after_mb"] <= r["rss_before_mb"] * 1.2
    print(
        f"  {'RSS':<36} {r['rss_before_mb']:.1f} MB before, peak {r['rss_peak_mb']:.1f} MB,"
        f" {r['rss_after_mb']:.1f} MB after [{ok[within]}]"
    )
    clean = r["log_tracebacks"] == 0 and r["log_never_retrieved"] == 0
    print(
        f"  {'daemon log':<36} {r['log_tracebacks']} tracebacks,"
        f" {r['log_never_retrieved']} unretrieved task errors,"
        f" {r['log_dropped_peers']} peers dropped [{ok[clean]}]"
    )


if __name__ == "__main__":
    raise SystemExit(main())
