"""The memory server beside the SQLite file, in one run: hybrid search p50/p95 and message
save p50/p99 at N memories on each backend (the same synthetic facts and queries as
search_scale.py), and two machines' daemons on one profile on the server: the time from a
fact committed through daemon A to the ``memory.changed`` notification daemon B sends its
clients (LISTEN/NOTIFY, then B's batching).

    python benchmarks/server_scale.py --memories 10000 --json server.json
    python benchmarks/search_scale.py --backend postgres --memories 10000 --json server.json

The server is pgserver's PostgreSQL 16 (Unix socket, in a temp folder) unless ``--dsn`` names
another. Both daemons are in this process: their connections, listeners and notification path
are the real ones, on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scale_data import SEED, TopicEmbedder, synthetic_queries
from search_scale import build as scale_build
from search_scale import pct, time_saves, time_search

from navi_desktop.config import load_settings
from navi_desktop.daemon.service import Service
from navi_desktop.memory import MemoryStore
from navi_desktop.memory.pg import PgMemoryStore
from navi_desktop.paths import Paths


async def measure(store: Any, queries: list[str], saves: int) -> dict[str, Any]:
    search_ms, load_ms = await time_search(store, queries)
    save_ms = await time_saves(store, saves, random.Random(SEED + 1))
    return {
        "hybrid_ms_p50": round(statistics.median(search_ms), 2),
        "hybrid_ms_p95": round(pct(search_ms, 95), 2),
        "save_ms_p50": round(statistics.median(save_ms), 3),
        "save_ms_p99": round(pct(save_ms, 99), 3),
        "first_search_ms": round(load_ms, 1),
    }


async def on_sqlite(path: Path, n: int, queries: list[str], saves: int) -> dict[str, Any]:
    async with await MemoryStore.open(path, embedder=TopicEmbedder()) as store:
        built = await scale_build(store, n, random.Random(SEED))
        return await measure(store, queries, saves) | {"build_s": round(built["build_s"], 1)}


async def on_server(
    dsn: str, source: Path, queries: list[str], saves: int, *, build: int | None = None
) -> dict[str, Any]:
    """The same memories on the server: copied from the SQLite file as `navi memory migrate
    --to postgres` does (``build``: added one by one through the engine instead, as a
    session end adds them; ~24 ms each)."""
    import asyncpg

    from navi_desktop.memory.copy_profile import copy_profile

    profile = f"bench{os.getpid()}"
    t0 = time.perf_counter()
    async with await PgMemoryStore.open(dsn, profile, embedder=TopicEmbedder()) as store:
        if build:
            await scale_build(store, build, random.Random(SEED))
        else:
            async with await MemoryStore.open(source, embedder=TopicEmbedder()) as file:
                await copy_profile(file, store)
    made = {("build_s" if build else "copy_s"): round(time.perf_counter() - t0, 1)}
    # As a server's administrator would have it after a bulk load: statistics gathered, and
    # the HNSW index the tables' owner creates when a store opens (the store's own role may
    # not create it).
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("ANALYZE navi.memories, navi.embeddings, navi.entity_links")
    finally:
        await conn.close()
    async with await PgMemoryStore.open(dsn, profile, embedder=TopicEmbedder()) as store:
        return await measure(store, queries, saves) | made


def _service(home: Path, dsn: str, profile: str, heard: list) -> Service:
    paths = Paths.from_env({"NAVI_HOME": str(home)})
    paths.config.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text(
        f'[memory]\nembedder = "none"\nprofile = "{profile}"\nbackend = "postgres"\ndsn = "{dsn}"\n'
    )
    settings, errors = load_settings(paths.config_file)
    assert not errors, errors

    async def broadcast(topic: str, method: str, params: dict[str, Any]) -> None:
        if method == "memory.changed" and "ids" in params:
            now = time.perf_counter()
            heard.extend((i, now) for i in params["ids"])

    return Service(paths, settings, broadcast)


async def two_daemons(dsn: str, facts: int) -> dict[str, Any]:
    """Fact committed on A (its memory.add returned) → memory.changed from B, in ms."""
    with tempfile.TemporaryDirectory(prefix="navi-two-") as tmp:
        profile = f"two{os.getpid()}"
        heard_b: list[tuple[int, float]] = []
        a = _service(Path(tmp) / "a", dsn, profile, [])
        b = _service(Path(tmp) / "b", dsn, profile, heard_b)
        add = a.handlers()["memory.add"]
        try:
            await (await b.store(profile)).stats()  # B connected and listening
            await (await a.store(profile)).stats()
            delays = []
            for i in range(facts):
                params = {"args": [f"value {i}"], "kwargs": {"key": f"bench key {i}"}}
                done = await add(params, None)
                committed = time.perf_counter()
                memory_id = done["memory"]["id"]
                for _ in range(400):
                    seen = [t for m, t in heard_b if m == memory_id]
                    if seen:
                        delays.append((seen[0] - committed) * 1000)
                        break
                    await asyncio.sleep(0.005)
                else:
                    raise SystemExit(f"daemon B never heard of memory {memory_id}")
                await asyncio.sleep(0.02)  # facts a little apart, as a session end's are not
        finally:
            await a.shutdown(budget_s=2)
            await b.shutdown(budget_s=2)
    return {
        "facts": facts,
        "notify_ms_p50": round(statistics.median(delays), 1),
        "notify_ms_p95": round(pct(delays, 95), 1),
        "notify_ms_max": round(max(delays), 1),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server = None
    dsn = args.dsn
    with tempfile.TemporaryDirectory(prefix="navi-server-bench-") as tmp:
        os.chmod(tmp, 0o755)  # pgserver run as root works as its own user in there
        if dsn is None:
            from navi_desktop.cli.server import import_pgserver

            server = import_pgserver().get_server(Path(tmp) / "pg", cleanup_mode="stop")
            dsn = server.get_uri()
        try:
            queries = synthetic_queries(args.queries, random.Random(SEED + 2), args.memories)
            result: dict[str, Any] = {"memories": args.memories, "queries": len(queries)}
            print("sqlite ...", file=sys.stderr)
            # The file's own folder: the store makes it private, and the server's
            # user must still reach pg/ beside it.
            file = Path(tmp) / "file" / "memory.db"
            result["sqlite"] = await on_sqlite(file, args.memories, queries, args.saves)
            print("postgres ...", file=sys.stderr)
            result["postgres"] = await on_server(
                dsn,
                file,
                queries,
                args.saves,
                build=args.memories if args.build_on_server else None,
            )
            sq, pg = result["sqlite"], result["postgres"]
            result["postgres_vs_sqlite"] = {
                key: round(pg[key] / sq[key], 2)
                for key in ("hybrid_ms_p50", "hybrid_ms_p95", "save_ms_p50", "save_ms_p99")
            }
            print("two daemons ...", file=sys.stderr)
            result["two_daemons"] = await two_daemons(dsn, args.notify_facts)
        finally:
            if server is not None:
                server.cleanup()
    result["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    result["server"] = (
        "pgserver (PostgreSQL 16, pgvector 0.6, Unix socket)" if args.dsn is None else "--dsn"
    )
    return result


def report(r: dict[str, Any]) -> str:
    sq, pg, two = r["sqlite"], r["postgres"], r["two_daemons"]
    lines = [f"{r['memories']} memories, {r['queries']} queries, load {r['load_avg']}"]
    for name, b in (("sqlite", sq), ("postgres", pg)):
        lines.append(
            f"{name:9} hybrid p50 {b['hybrid_ms_p50']:.1f} ms p95 {b['hybrid_ms_p95']:.1f} ms,"
            f" save p50 {b['save_ms_p50']:.2f} ms p99 {b['save_ms_p99']:.2f} ms"
            + (f" (built in {b['build_s']:.0f} s)" if "build_s" in b else "")
            + (f" (copied from the file in {b['copy_s']:.0f} s)" if "copy_s" in b else "")
        )
    lines.append(f"postgres / sqlite: {r['postgres_vs_sqlite']}")
    lines.append(
        f"two daemons: fact on A -> memory.changed on B p50 {two['notify_ms_p50']} ms,"
        f" p95 {two['notify_ms_p95']} ms, max {two['notify_ms_max']} ms ({two['facts']} facts)"
    )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--memories", type=int, required=True)
    p.add_argument("--json", type=Path, required=True, help="where to write the results")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--saves", type=int, default=1000)
    p.add_argument("--notify-facts", type=int, default=100, help="facts for the two-daemon figure")
    p.add_argument("--dsn", help="a server to use instead of a temporary pgserver")
    p.add_argument(
        "--build-on-server",
        action="store_true",
        help="add the memories to the server one by one instead of copying the file's",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    result = asyncio.run(run(args))
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))


if __name__ == "__main__":
    main()
