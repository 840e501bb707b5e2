"""Time to build one turn's context (memory block) on a profile of N memories.

    python benchmarks/context_build.py --memories 10000 --json out.json

Builds a synthetic profile as ``search_scale.py`` does (N facts, 768-d vectors from a
benchmark-only embedder, plus 20 rules and 50 session summaries), then times
``build_context`` for varied user messages: the profile summary, the active rules, the hybrid
search for relevant facts, the latest session summary on a first turn, and the rendering
within the token budget. The query embedding is timed apart and subtracted (a real model's
embedding call is the "plus one query embedding" of the goal); both figures are reported.
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

sys.path.insert(0, str(Path(__file__).parent))

from search_scale import (
    SEED,
    TopicEmbedder,
    build,
    pct,
    synthetic_queries,
)

from navi_desktop.memory import MemoryStore, NewMemory
from navi_desktop.pipeline.context import ContextSettings, build_context


class TimedEmbedder(TopicEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.spent = 0.0

    async def embed(self, texts, *, query):  # type: ignore[override]
        t0 = time.perf_counter()
        try:
            return await super().embed(texts, query=query)
        finally:
            self.spent += time.perf_counter() - t0


async def run(n: int, turns: int) -> dict[str, object]:
    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory(prefix="navi-bench-") as tmp:
        embedder = TimedEmbedder()
        store = await MemoryStore.open(Path(tmp) / "memory.db", embedder=embedder)
        try:
            await build(store, n, rng)
            await store.add_memories(
                [
                    NewMemory(f"standing rule number {i}: keep answers short", kind="rule")
                    for i in range(20)
                ]
                + [
                    NewMemory(
                        f"We talked about topic {i} and planned the next steps.",
                        kind="episode",
                        source="conversation",
                    )
                    for i in range(50)
                ]
            )
            await store.set_profile_summary("The user is a synthetic person. " * 20)
            await store.backfill_embeddings(batch=500)
            queries = synthetic_queries(turns, rng)
            await build_context(
                store, user_text="warm up", history=[], session_id=None, first_turn=True
            )
            total, without_embedding, sizes = [], [], []
            for i, text in enumerate(queries):
                embedder.spent = 0.0
                t0 = time.perf_counter()
                ctx = await build_context(
                    store,
                    user_text=text,
                    history=[],
                    session_id=None,
                    first_turn=i % 2 == 0,
                    settings=ContextSettings(),
                )
                elapsed = (time.perf_counter() - t0) * 1000
                total.append(elapsed)
                without_embedding.append(elapsed - embedder.spent * 1000)
                sizes.append(len(ctx.injections))
        finally:
            await store.close()
    return {
        "memories": n,
        "turns": turns,
        "context_ms_p50": round(statistics.median(without_embedding), 2),
        "context_ms_p95": round(pct(without_embedding, 95), 2),
        "with_embedding_ms_p50": round(statistics.median(total), 2),
        "injected_per_turn_p50": statistics.median(sizes),
        "embedder": f"{TopicEmbedder.model} (its cost is excluded from context_ms)",
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = asyncio.run(run(args.memories, args.turns))
    print(
        f"context for {result['memories']} memories: p50 {result['context_ms_p50']} ms,"
        f" p95 {result['context_ms_p95']} ms (query embedding excluded)"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
