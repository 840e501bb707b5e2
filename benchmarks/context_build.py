"""Time to build one turn's context (memory block) on a profile of N memories.

    python benchmarks/context_build.py --memories 10000 --json out.json

Builds a synthetic profile as ``search_scale.py`` does (N facts, 768-d vectors from a
benchmark-only embedder, plus 20 rules and 50 session summaries), then times
``build_context`` for varied user messages: the profile summary, the active rules, the hybrid
search for relevant facts, the latest session summary on a first turn, and the rendering
within the token budget. The query embedding is timed apart and subtracted (a real model's
embedding call is the "plus one query embedding" of the goal); both figures are reported.

Each fact carries an evidence quote (the user's sentence it came from: the fact and a few
words around it), as extracted facts do. On the same store and queries it then compares how
relevant facts are written into the block, in tokens per injected fact (the budget's own
estimate) and facts per turn: the format before triples (``[category, since DATE] "user key:
value"``, kept here as a reference only), triples alone, and what Navi sends: triples, with
evidence quotes where the budget has room left once every fact that fits is in.
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

from collections.abc import Callable

from search_scale import (
    SEED,
    TopicEmbedder,
    pct,
    synthetic_facts,
    synthetic_queries,
)

from navi_desktop.memory import MemoryStore, NewMemory
from navi_desktop.memory.documents import memory_text
from navi_desktop.memory.models import Memory
from navi_desktop.pipeline import context
from navi_desktop.pipeline.context import (
    ContextSettings,
    TurnContext,
    build_context,
    estimate_tokens,
    quote,
)

HEADER = "Possibly relevant memories:"


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


TRIPLE = context._fact_line  # what Navi sends


def before_triples(memory: Memory, *, evidence: bool = True) -> str:
    """How a relevant memory was written into the block before triples (reference only)."""
    label = memory.category or memory.kind
    return f"[{label}, since {memory.valid_from[:10]}] {quote(memory_text(memory))}"


def triple_alone(memory: Memory, *, evidence: bool = True) -> str:
    return TRIPLE(memory, evidence=False)


def fact_lines(ctx: TurnContext) -> list[str]:
    """The block's lines for relevant facts, as sent (they follow the injections' ranks)."""
    lines = ctx.messages[0]["content"].split("\n")
    if HEADER not in lines:
        return []
    section = lines[lines.index(HEADER) + 1 :]
    section = section[: section.index("")] if "" in section else section[:-1]
    relevant = sorted((i for i in ctx.injections if i.reason == "relevant"), key=lambda i: i.rank)
    assert len(section) == len(relevant), (section, relevant)
    pairs = zip(section, relevant, strict=True)
    return [line for line, i in pairs if i.memory is not None and i.memory.kind == "fact"]


# What users say around a fact, so that its evidence quote has something of its own to add.
ASIDES = (
    "since we moved last spring",
    "and honestly it suits me",
    "at least for the next few months",
    "as I told my colleagues yesterday",
    "which still surprises my family",
    "after a long week of thinking it over",
)


def said(fact: NewMemory, rng: random.Random) -> str:
    """An evidence quote in the user's words: the fact, and a few words around it."""
    stated = "I" + fact.value.removeprefix("The user") if fact.subject == "user" else fact.value
    return f"{stated}, {rng.choice(ASIDES)}"


async def build(store: MemoryStore, n: int, rng: random.Random) -> None:
    facts = synthetic_facts(n, rng)
    asides = random.Random(SEED + 1)  # its own: the queries stay those of search_scale.py
    for fact in facts:
        fact.evidence = said(fact, asides)
    for start in range(0, n, 1000):
        await store.add_memories(facts[start : start + 1000], actor="bench")


async def fact_costs(
    store: MemoryStore,
    queries: list[str],
    formats: dict[str, Callable[..., str]],
    budget: int,
) -> dict[str, dict[str, float]]:
    """Per format: mean tokens per injected fact line, the p50 facts and block tokens per turn
    when the block is built with that format (the budget decides how many fit), and the share
    of fact lines that carry an evidence quote."""
    out = {}
    try:
        for name, format_line in formats.items():
            context._fact_line = format_line
            per_fact, facts, blocks, quoted, times = [], [], [], 0, []
            for text in queries:
                t0 = time.perf_counter()
                ctx = await build_context(
                    store,
                    user_text=text,
                    history=[],
                    session_id=None,
                    first_turn=False,
                    settings=ContextSettings(budget_tokens=budget),
                )
                times.append((time.perf_counter() - t0) * 1000)
                lines = fact_lines(ctx)
                per_fact.extend(estimate_tokens(line) for line in lines)
                quoted += sum(" \u2014 " in line for line in lines)
                facts.append(len(lines))
                blocks.append(ctx.block_tokens)
            out[name] = {
                "tokens_per_fact": round(statistics.mean(per_fact), 1),
                "facts_per_turn_p50": statistics.median(facts),
                "block_tokens_p50": statistics.median(blocks),
                "quoted_share": round(quoted / max(1, len(per_fact)), 2),
                "context_ms_p50": round(statistics.median(times), 2),  # embedding included
            }
    finally:
        context._fact_line = TRIPLE
    return out


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
            formats = {
                "before": before_triples,
                "triple": triple_alone,
                "triple_and_evidence": TRIPLE,
            }
            # The default budget, then one with room to spare (a profile with fewer rules and
            # a shorter summary than this one leaves facts about that much).
            budgets = (ContextSettings().budget_tokens, 2 * ContextSettings().budget_tokens)
            costs = {b: await fact_costs(store, queries, formats, b) for b in budgets}
        finally:
            await store.close()
    return {
        "memories": n,
        "turns": turns,
        "context_ms_p50": round(statistics.median(without_embedding), 2),
        "context_ms_p95": round(pct(without_embedding, 95), 2),
        "with_embedding_ms_p50": round(statistics.median(total), 2),
        "injected_per_turn_p50": statistics.median(sizes),
        "fact_lines": costs,
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
    for budget, costs in result["fact_lines"].items():  # type: ignore[attr-defined]
        print(f"fact lines, memory block budget {budget} tokens:")
        for name, cost in costs.items():
            print(
                f"  {name}: {cost['tokens_per_fact']} tokens per injected fact,"
                f" p50 {cost['facts_per_turn_p50']} facts and {cost['block_tokens_p50']}"
                f" block tokens per turn, {cost['quoted_share']:.0%} of fact lines quoted,"
                f" context p50 {cost['context_ms_p50']} ms"
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
