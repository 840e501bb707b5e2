"""What entity profiles cost on a large profile: the list, one profile, a merge and a rename,
a search by an alias, a message save, and the sweep that drops unmentioned entities after a
forget (old statement against the current one).

    python benchmarks/entity_profiles.py [--messages 20000] [--names 5000] [--runs 20] [--json F]

In a throw-away folder under the temp directory, builds a profile through the engine's public
API: ``--messages`` user messages in sessions of 20, each naming two to four of ``--names``
made-up capitalised names (drawn with a Zipf-like skew, as real names are: a few come up all
the time), and one fact per session naming two of them. No embedder: text search only.
Reports the median and the slowest of ``--runs`` calls of each operation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from navi_desktop.memory import MemoryStore

PER_SESSION = 20
SYLLABLES = "ka lo mi ra te su na vo pe li da xo ri ma zu be fi go".split()
# The sweep as it was (one scan of every link per entity), and as it is now.
OLD_SWEEP = (
    "DELETE FROM entities WHERE NOT EXISTS"
    " (SELECT 1 FROM entity_links WHERE entity_id = entities.id)"
)
NEW_SWEEP = (
    "DELETE FROM entities WHERE NOT EXISTS (SELECT 1 FROM entity_links l"
    " WHERE l.entity_id = entities.id AND l.memory_id IS NOT NULL)"
    " AND NOT EXISTS (SELECT 1 FROM entity_links l"
    " WHERE l.entity_id = entities.id AND l.message_id IS NOT NULL)"
)


def made_up_names(n: int, rnd: random.Random) -> list[str]:
    names: set[str] = set()
    while len(names) < n:
        names.add("".join(rnd.choice(SYLLABLES) for _ in range(rnd.randint(2, 4))).capitalize())
    return sorted(names)


def pick(names: list[str], rnd: random.Random, k: int) -> list[str]:
    # Zipf-like: the i-th name is drawn about 1/(i+1) as often as the first.
    weights = [1 / (i + 1) for i in range(len(names))]
    return rnd.choices(names, weights=weights, k=k)


async def build(store: MemoryStore, messages: int, names: list[str], rnd: random.Random) -> None:
    sid = ""
    for i in range(messages):
        if i % PER_SESSION == 0:
            sid = (await store.create_session(f"session {i // PER_SESSION}")).id
            a, b = pick(names, rnd, 2)
            await store.add_memory(f"{a} works with {b} on the harbour project")
        said = " and ".join(pick(names, rnd, rnd.randint(2, 4)))
        await store.save_message(sid, "user", f"yesterday {said} came over for dinner")


async def timed(work: Callable[[], Awaitable[Any]], runs: int) -> dict[str, float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        await work()
        times.append((time.perf_counter() - start) * 1000)
    return {"median_ms": round(statistics.median(times), 2), "max_ms": round(max(times), 2)}


async def sweep(store: MemoryStore, sql: str) -> float:
    """One sweep statement, rolled back (nothing is unmentioned: it deletes nothing)."""
    await store.db.execute("BEGIN IMMEDIATE")
    try:
        start = time.perf_counter()
        await store.db.execute(sql)
        return round((time.perf_counter() - start) * 1000, 1)
    finally:
        await store.db.execute("ROLLBACK")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    rnd = random.Random(20240611)
    names = made_up_names(args.names, rnd)
    with tempfile.TemporaryDirectory(prefix="navi-entities-") as tmp:
        async with await MemoryStore.open(Path(tmp) / "memory.db") as store:
            start = time.perf_counter()
            await build(store, args.messages, names, rnd)
            built_s = time.perf_counter() - start
            counts = await store.db.fetchone(
                "SELECT (SELECT count(*) FROM entities), (SELECT count(*) FROM entity_links)"
            )
            await store.db.analyze()
            top = names[0].lower()
            last, _ = await store.list_entities(limit=1, offset=counts[0] - 1)
            rare = last[0].name  # the least mentioned
            out: dict[str, Any] = {
                "messages": args.messages,
                "entities": counts[0],
                "links": counts[1],
                "build_s": round(built_s, 1),
                "list_by_mentions": await timed(lambda: store.list_entities(), args.runs),
                "list_by_name": await timed(lambda: store.list_entities(sort="name"), args.runs),
                "list_filtered": await timed(lambda: store.list_entities(query="kalo"), args.runs),
                "profile_most_mentioned": await timed(lambda: store.entity(top), args.runs),
                "profile_rare": await timed(lambda: store.entity(rare), args.runs),
                "unknown_with_suggestion": await timed(
                    lambda: _unknown(store, top + "x"), args.runs
                ),
            }
            others = iter(names[1 : 1 + args.runs])
            out["merge"] = await timed(lambda: store.merge_entities(top, next(others)), args.runs)
            out["search_by_alias"] = await timed(
                lambda: store.search(f"what about {names[1]}?"), args.runs
            )
            renames = iter(range(args.runs))
            out["rename"] = await timed(
                lambda: store.rename_entity(rare, f"{rare} {next(renames)}"), args.runs
            )
            sid = (await store.create_session("saves")).id
            out["save_message"] = await timed(
                lambda: store.save_message(sid, "user", f"met {names[2]} and {names[1]} today"),
                args.runs * 5,
            )
            out["sweep_old_ms"] = await sweep(store, OLD_SWEEP)
            out["sweep_new_ms"] = await sweep(store, NEW_SWEEP)
    return out


async def _unknown(store: MemoryStore, name: str) -> None:
    try:
        await store.entity(name)
    except Exception:
        return
    raise AssertionError(f"{name!r} was found")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--names", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    text = json.dumps(asyncio.run(main(options)), indent=2)
    print(text)
    if options.json:
        options.json.write_text(text + "\n")
