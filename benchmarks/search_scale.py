"""Scale benchmark for the memory engine: hybrid search against the plain alternatives, message
saves, index load, file size and vector recall at N memories.

    python benchmarks/search_scale.py --memories 1000000 --json out.json [--home DIR]

What it does, in a throw-away NAVI_HOME under the temp directory (or ``--home``, kept and
measured again next time):

1. Builds a synthetic profile of N fact memories (``scale_data.py``) in batches of 1000 (one
   transaction each), then ``backfill_embeddings(batch=1000)``, all through the engine's public
   API. The store is then closed and ``os.sync()`` lets the kernel write the build back to
   disk (timed straight after writing half a gigabyte, saves waited on that write-back);
   everything below runs on the file opened again, as after a restart. ``open_s`` is the
   first opening, which upgrades a file an older Navi wrote (``--home``).
2. Hybrid search: Q varied queries through ``store.search(query)`` with the embedder active,
   so all three signals run (FTS5 BM25, vector KNN, entity match) plus fusion and hydration.
   p50 and p95 after a few warm-up queries. The first search loads the in-memory 1-bit index:
   that one-off cost is ``index_load_ms``.
3. The plain alternatives, on the same file in the same run: for each of the first B queries,
   the hybrid search, sqlite-vec's exact search and BM25 alone run back to back (their order
   rotating), so that whatever else loads the machine falls on all three alike. Each gets
   p50/p95 and its ratio to the hybrid search's p50/p95 over those same queries.
   - sqlite-vec's exact search: ``vec_distance_cosine`` over every stored memory vector of the
     model, ``ORDER BY`` distance ``LIMIT 10`` (a full scan: sqlite-vec's exact KNN over the
     vectors as the file stores them), the query embedded as for the hybrid search.
   - FTS5 BM25 alone: ``memories_fts MATCH`` the query's terms joined with OR (the terms the
     hybrid search starts from), ``ORDER BY rank LIMIT 10``.
   Neither filters out inactive memories (all of them are active here).
4. Vector recall@10: for a sample of queries, the vector signal's top 10 (1-bit coarse scan +
   re-rank of the stored copies) against an exact cosine top 10 over the float vectors of all
   memories (their texts embedded again, in chunks). The same against sqlite-vec's exact
   search of step 3 shows what the stored copies alone lose.
5. Message save: 1000 ``store.save_message`` calls into one session on the N-memory profile
   (the hot path: one transaction, FTS row, entity links). p50 and p99.
6. The file (plus its WAL) after all of the above: bytes, bytes per memory, and the tables and
   indexes that take the most (SQLite's ``dbstat``).

The embedder is ``TopicEmbedder`` (scale_data.py), a benchmark-only stand-in for a real model:
each text's vector is the normalised sum of fixed pseudo-random 768-d vectors for its words.
It costs about as much per query as a numpy sum: latency here includes that and nothing of a
real model's inference.
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
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import sqlean
from scale_data import (  # noqa: F401  (re-exported: other benchmarks import them from here)
    DIM,
    SEED,
    TopicEmbedder,
    fact_batches,
    people,
    synthetic_facts,
    synthetic_messages,
    synthetic_queries,
)

from navi_desktop.memory import MemoryStore
from navi_desktop.memory.documents import memory_text
from navi_desktop.memory.hamming import scan_name
from navi_desktop.memory.search_filters import make_filters
from navi_desktop.memory.textproc import fts_terms

K = 10

# -- measuring --------------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


async def build(store: MemoryStore, n: int, rng: random.Random) -> dict[str, float | None]:
    t0 = time.perf_counter()
    added = 0
    for batch in fact_batches(n, rng):
        results = await store.add_memories(batch, actor="bench")
        assert all(r.action == "added" for r in results), "synthetic facts must not collide"
        added += len(batch)
        if added % 50_000 == 0:
            print(f"  added {added} ({time.perf_counter() - t0:.0f}s)", file=sys.stderr)
    t1 = time.perf_counter()
    embedded = 0
    while got := await store.backfill_embeddings(batch=1000, limit=50_000):
        embedded += got
        print(f"  embedded {embedded} ({time.perf_counter() - t1:.0f}s)", file=sys.stderr)
    t2 = time.perf_counter()
    assert embedded == n, (embedded, n)
    return {"add_s": t1 - t0, "embed_s": t2 - t1, "build_s": t2 - t0}


async def time_search(store: MemoryStore, queries: list[str]) -> tuple[list[float], float]:
    t0 = time.perf_counter()
    await store.search("warm up the index")  # loads the in-memory 1-bit index
    load_ms = (time.perf_counter() - t0) * 1000
    for q in queries[:5]:
        await store.search(q)
    times = []
    for q in queries:
        t0 = time.perf_counter()
        hits = await store.search(q)
        times.append((time.perf_counter() - t0) * 1000)
        assert hits, f"no hits for {q!r}"
    return times, load_ms


class Plain:
    """The alternatives a reader would compare with, each a plain query on a read connection
    (as the engine's own signals run: ``Database.read``, in a worker thread)."""

    def __init__(self, store: MemoryStore, embedder: TopicEmbedder, form: str) -> None:
        self.store, self.embedder = store, embedder
        self.form = form  # how sqlite-vec reads the stored vectors: vec_f32 or vec_int8
        self.found: dict[str, list[int]] = {}  # query -> the exact search's top K

    @classmethod
    async def open(cls, store: MemoryStore, embedder: TopicEmbedder) -> Plain:
        async with store.db.reading():
            row = await store.db.fetchone(
                "SELECT length(vector), dim FROM embeddings WHERE model = ? LIMIT 1",
                (embedder.model,),
            )
        return cls(store, embedder, "vec_f32" if row[0] == 4 * row[1] else "vec_int8")

    def query_blob(self, vector: np.ndarray) -> bytes:
        if self.form == "vec_f32":
            return vector.astype(np.float32).tobytes()
        scaled = np.round(vector / max(float(np.abs(vector).max()), 1e-12) * 127)
        return scaled.astype(np.int8).tobytes()

    async def exact(self, query: str) -> None:
        vector = (await self.embedder.embed([query], query=True))[0]
        sql = (
            "SELECT memory_id FROM embeddings WHERE model = ? AND memory_id IS NOT NULL"
            f" ORDER BY vec_distance_cosine({self.form}(vector), {self.form}(?)) LIMIT {K}"
        )
        params = (self.embedder.model, self.query_blob(vector))
        rows = await self.store.db.read(lambda conn: conn.execute(sql, params).fetchall())
        self.found[query] = [r[0] for r in rows]

    async def bm25(self, query: str) -> None:
        match = " OR ".join(fts_terms(query))
        sql = f"SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rank LIMIT {K}"
        await self.store.db.read(lambda conn: conn.execute(sql, (match,)).fetchall())

    async def hybrid(self, query: str) -> None:
        await self.store.search(query)


async def compare(plain: Plain, queries: list[str]) -> dict[str, list[float]]:
    """Each query through each method back to back, the order rotating per query."""
    runs: dict[str, Callable[[str], Awaitable[None]]] = {
        "hybrid": plain.hybrid,
        "exact_knn": plain.exact,
        "bm25_alone": plain.bm25,
    }
    for run in runs.values():  # the first full scan reads the whole table into the cache
        await run(queries[-1])
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for i, q in enumerate(queries):
        for name in names[i % 3 :] + names[: i % 3]:
            t0 = time.perf_counter()
            await runs[name](q)
            times[name].append((time.perf_counter() - t0) * 1000)
    return times


async def exact_top(store: MemoryStore, embedder: TopicEmbedder, queries: list[str]) -> list[set]:
    """The exact cosine top K of each query over the float vectors of all embedded memories:
    their texts embedded again in chunks (the file may hold only quantised copies)."""
    qv = embedder.embed_sync(queries)  # (Q, dim)
    best_ids = np.zeros((len(queries), 0), dtype=np.int64)
    best_sims = np.zeros((len(queries), 0), dtype=np.float32)
    last = 0
    while True:
        async with store.db.reading():
            rows = await store.db.fetchall(
                "SELECT m.* FROM memories m WHERE m.id > ? AND EXISTS (SELECT 1 FROM embeddings"
                " e WHERE e.memory_id = m.id AND e.model = ?) ORDER BY m.id LIMIT 20000",
                (last, embedder.model),
            )
        if not rows:
            break
        last = rows[-1]["id"]
        ids = np.array([r["id"] for r in rows], dtype=np.int64)
        sims = qv @ embedder.embed_sync([memory_text(r) for r in rows]).T  # (Q, chunk)
        all_sims = np.concatenate([best_sims, sims], axis=1)
        all_ids = np.concatenate([best_ids, np.broadcast_to(ids, sims.shape)], axis=1)
        top = np.argsort(-all_sims, axis=1, kind="stable")[:, :K]
        best_sims = np.take_along_axis(all_sims, top, axis=1)
        best_ids = np.take_along_axis(all_ids, top, axis=1)
    return [set(row.tolist()) for row in best_ids]


async def vector_recall(
    store: MemoryStore, embedder: TopicEmbedder, queries: list[str], truth: list[set]
) -> float:
    """Mean recall@K of the vector signal (coarse scan + re-rank) against ``truth``."""
    # The vector signal on its own (engine internals): store.search fuses it with the others.
    filters = make_filters(None, None, None, None, None, False)
    recalls = []
    for q, exact in zip(queries, truth, strict=True):
        vec = embedder.embed_sync([q])[0]
        codes = await store._codes(vec)
        scanned = await store._scanned(codes, vec, filters)  # as search does
        knn = partial(store._knn, codes, vec, filters, scanned)
        got = {key[1] for key, _ in (await store.db.read(knn))[:K]}
        recalls.append(len(exact & got) / K)
    return float(np.mean(recalls))


async def time_saves(store: MemoryStore, count: int, rng: random.Random) -> list[float]:
    session = await store.create_session("bench")
    times = []
    for role, text in synthetic_messages(count, rng):
        t0 = time.perf_counter()
        await store.save_message(session.id, role, text)
        times.append((time.perf_counter() - t0) * 1000)
    return times


def evict(path: Path) -> None:
    """Drop the file's pages from the OS page cache (clean after os.sync), as a restart of the
    machine would: the index then loads from the disk."""
    for name in (path, Path(f"{path}-wal")):
        if name.exists():
            fd = os.open(name, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def largest(path: Path, top: int = 6) -> dict[str, int]:
    """Bytes of the largest tables and indexes (dbstat, one row per b-tree)."""
    conn = sqlean.connect(str(path))
    try:
        rows = conn.execute(
            "SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE ORDER BY pgsize DESC LIMIT ?",
            (top,),
        ).fetchall()
    finally:
        conn.close()
    return {name: size for name, size in rows}


def summary(times: list[float], hybrid: list[float]) -> dict[str, float]:
    p50, p95 = statistics.median(times), pct(times, 95)
    return {
        "ms_p50": round(p50, 2),
        "ms_p95": round(p95, 2),
        "vs_hybrid_p50": round(p50 / statistics.median(hybrid), 2),
        "vs_hybrid_p95": round(p95 / pct(hybrid, 95), 2),
    }


async def measure(store: MemoryStore, embedder: TopicEmbedder, args: Any, rng: random.Random):
    n = args.memories
    queries = synthetic_queries(args.queries, rng, n)
    search_ms, load_ms = await time_search(store, queries)
    plain = await Plain.open(store, embedder)
    paired = await compare(plain, queries[: args.baseline_queries])
    sample = queries[: args.recall_sample]
    truth = await exact_top(store, embedder, sample)
    recall = await vector_recall(store, embedder, sample, truth)
    overlap = [(plain.found[q], t) for q, t in zip(sample, truth, strict=True) if q in plain.found]
    stored = np.mean([len(set(f) & t) / K for f, t in overlap]) if overlap else None
    save_ms = await time_saves(store, args.saves, rng)
    hybrid, t = paired["hybrid"], store.tuning
    return {
        "hybrid_ms_p50": round(statistics.median(search_ms), 2),
        "hybrid_ms_p95": round(pct(search_ms, 95), 2),
        "save_ms_p50": round(statistics.median(save_ms), 3),
        "save_ms_p99": round(pct(save_ms, 99), 3),
        "hybrid_ms_max": round(max(search_ms), 2),
        "save_ms_max": round(max(save_ms), 3),
        "queries": len(queries),
        "saves": len(save_ms),
        "index_load_ms": round(load_ms, 1),
        "vector_recall_at_10": round(recall, 3),
        "recall_sample": len(sample),
        # Candidates read for the re-rank (a share of the index since int8 copies).
        "vector_candidates": max(t.rerank, int(n * getattr(t, "rerank_share", 0))),
        "same_queries": {
            "queries": len(hybrid),
            "hybrid": {
                "ms_p50": round(statistics.median(hybrid), 2),
                "ms_p95": round(pct(hybrid, 95), 2),
            },
            "exact_knn": summary(paired["exact_knn"], hybrid),
            "bm25_alone": summary(paired["bm25_alone"], hybrid),
        },
        "exact_knn_method": f"sqlite-vec vec_distance_cosine({plain.form}) full scan, LIMIT {K}",
        "exact_knn_recall_at_10": None if stored is None else round(float(stored), 3),
        "exact_knn_recall_sample": len(overlap),
    }


async def build_or_reuse(store: MemoryStore, n: int, home: Path | None, rng: random.Random):
    existing = (await store.stats())["memories"].get("fact", {}).get("active", 0)
    if existing == n:  # a kept profile (--home): measure it again, skip the build
        print(f"reusing the {n} memories in {home}", file=sys.stderr)
        for _ in fact_batches(n, rng):  # keep the random stream as in a fresh run
            pass
        return {"add_s": None, "embed_s": None, "build_s": None}
    if existing:
        raise SystemExit(f"{home} holds {existing} memories, not {n}: use another --home")
    print(f"building {n} memories ...", file=sys.stderr)
    return await build(store, n, rng)


async def run(args: Any) -> dict:
    n, home = args.memories, args.home
    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory(prefix="navi-bench-") as tmp:
        os.environ["NAVI_HOME"] = str(home or tmp)
        embedder = TopicEmbedder()
        t0 = time.perf_counter()
        store = await MemoryStore.open_profile("bench", embedder=embedder)
        open_s = time.perf_counter() - t0  # with the upgrade of a file an older Navi wrote
        try:
            timings = await build_or_reuse(store, n, home, rng)
        finally:
            await store.close()  # checkpoints the WAL into the file
        os.sync()  # see the module's docstring
        if args.cold:
            evict(store.path)
        result: dict[str, Any] = {}
        if not args.build_only:
            # Opened again, as after a restart: the first search loads the 1-bit index.
            async with await MemoryStore.open_profile("bench", embedder=embedder) as store:
                result = await measure(store, embedder, args, rng)
        db_path = store.path
        files = (db_path, Path(f"{db_path}-wal"))
        size = sum(p.stat().st_size for p in files if p.exists())
        tables = largest(db_path)
    return {
        "memories": n,
        **result,
        "file_bytes": size,
        "bytes_per_memory": round(size / n),
        "largest_bytes": tables,
        "open_s": round(open_s, 1),
        "cold_cache": args.cold,
        **{k: None if v is None else round(v, 1) for k, v in timings.items()},
        "embedder": f"{TopicEmbedder.model} (bag of random word vectors; query cost ~numpy sum)",
        "scan": scan_name(args.memories),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def report(result: dict) -> str:
    built = (
        f"built in {result['build_s']}s (add {result['add_s']}s, embed {result['embed_s']}s)"
        if result["build_s"] is not None
        else "reused"
    )
    lines = [
        f"{result['memories']} memories, {built}, file {result['file_bytes'] / 1e6:.1f} MB"
        f" ({result['bytes_per_memory']} bytes per memory); first opening {result['open_s']}s"
    ]
    if "hybrid_ms_p50" in result:
        same = result["same_queries"]
        lines += [
            f"hybrid search: p50 {result['hybrid_ms_p50']} ms, p95 {result['hybrid_ms_p95']} ms"
            f" over {result['queries']} queries (first search, index load:"
            f" {result['index_load_ms']} ms)",
            f"same {same['queries']} queries, back to back: hybrid p50"
            f" {same['hybrid']['ms_p50']} ms, p95 {same['hybrid']['ms_p95']} ms",
        ]
        for name, label in (("exact_knn", "sqlite-vec exact"), ("bm25_alone", "BM25 alone")):
            s = same[name]
            lines.append(
                f"  {label}: p50 {s['ms_p50']} ms ({s['vs_hybrid_p50']}x hybrid),"
                f" p95 {s['ms_p95']} ms ({s['vs_hybrid_p95']}x hybrid)"
            )
        lines += [
            f"  ({result['exact_knn_method']})",
            f"message save:  p50 {result['save_ms_p50']} ms, p99 {result['save_ms_p99']} ms"
            f" over {result['saves']} saves",
            f"vector recall@10 vs exact cosine: {result['vector_recall_at_10']}"
            f" ({result['recall_sample']} queries, {result['vector_candidates']} re-ranked"
            f" candidates); sqlite-vec exact over the stored vectors:"
            f" {result['exact_knn_recall_at_10']} ({result['exact_knn_recall_sample']} queries)",
        ]
    top = ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in result["largest_bytes"].items())
    lines += [
        f"largest: {top}",
        f"embedder: {result['embedder']}; load average {result['load_avg']}",
        f"vector scan: {result['scan']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    known, rest = first.parse_known_args(argv)
    if known.backend == "postgres":  # the server beside the file, in one run
        import server_scale

        server_scale.main(rest)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backend",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="postgres: the memory server side by side with the file (server_scale.py)",
    )
    parser.add_argument("--memories", type=int, required=True, help="fact memories to build")
    parser.add_argument("--json", type=Path, required=True, help="where to write the results")
    parser.add_argument("--queries", type=int, default=200, help="hybrid searches to time")
    parser.add_argument(
        "--baseline-queries",
        type=int,
        default=30,
        help="queries timed through the plain alternatives too",
    )
    parser.add_argument("--saves", type=int, default=1000, help="messages to save and time")
    parser.add_argument("--recall-sample", type=int, default=50, help="queries for recall@10")
    parser.add_argument(
        "--home", type=Path, help="keep the profile in this NAVI_HOME and reuse it next time"
    )
    parser.add_argument(
        "--build-only", action="store_true", help="build the profile into --home, measure nothing"
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="measure from a cold page cache (the file's pages dropped before it is opened)",
    )
    args = parser.parse_args(argv)
    if args.build_only and args.home is None:
        parser.error("--build-only needs --home (a profile to keep)")
    for name in ("memories", "queries", "baseline_queries", "saves", "recall_sample"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    result = asyncio.run(run(args))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))


if __name__ == "__main__":
    main()
