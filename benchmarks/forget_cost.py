"""What a forget costs on a large profile: the preview, and the forget itself in each scope.

    python benchmarks/forget_cost.py [--messages 10000] [--runs 5] [--json out.json]

In a throw-away folder under the temp directory, builds a profile through the engine's
public API: ``--messages`` messages in sessions of 20 (a user turn, then the assistant's),
one fact per session (``add_memories``) with an evidence quote from that session, and one
session summary per session. Each fact's value (a made-up word) is repeated by the assistant,
quoted in the summary, and mentioned again in 2 later sessions, so a forget everywhere
rewrites 4 messages, 1 summary and the history row that quotes it, then re-indexes them
(and the messages after them). No embedder: text search only (the re-index drops a
message's vectors; they are re-embedded later, outside the forget).

Reports the median and the slowest of ``--runs`` forgets of different facts, for
``forget_preview``, ``forget(scope="evidence")`` and ``forget()`` (everywhere), each until
its write-ahead log is folded into the file; plus the file's size. A daily backup of the
profile would be scrubbed the same way, multiplying the forget's cost by 1 + backups.
``--accented`` puts non-ASCII text in most messages: SQLite can then no longer skip rows that
cannot match, and every one is matched in Python (the worst case).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from navi_desktop.memory import MemoryStore, NewMemory

PER_SESSION = 20
WORDS = """garden river lamp window coffee train market violin paper stone orange bridge
letter cloud forest kitchen bicycle castle harbor ladder""".split()


def made_up(n: int) -> str:
    rng = random.Random(n)
    return "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(4)) + str(n)


async def build(path: Path, messages: int, accented: bool = False) -> list[int]:
    rng = random.Random(7)
    extra = " Café crème, s'il vous plaît." if accented else ""
    sessions = messages // PER_SESSION
    ids: list[int] = []
    async with await MemoryStore.open(path) as store:
        for s in range(sessions):
            session = await store.create_session(f"chat {s}")
            value = made_up(s)
            for t in range(PER_SESSION // 2):
                words = " ".join(rng.choice(WORDS) for _ in range(12))
                user = f"My code word is {value}." if t == 0 else f"I think {words}.{extra}"
                if t in (1, 2) and s >= 4:
                    user = f"Earlier I told you {made_up(s - 4 + t)}, remember? {words}."
                reply = f"Got it: {value}." if t == 0 else f"Sure, {words}."
                await store.save_message(session.id, "user", user)
                await store.save_message(session.id, "assistant", reply)
            result, _ = await store.add_memories(
                [
                    NewMemory(
                        value,
                        key=f"code word {s}",
                        category="other",
                        evidence=f"My code word is {value}",
                        session_id=session.id,
                        source="conversation",
                    ),
                    NewMemory(
                        f"The user shared the code word {value} and chatted.",
                        kind="episode",
                        session_id=session.id,
                        source="conversation",
                    ),
                ]
            )
            assert result.memory is not None
            ids.append(result.memory.id)
    return ids


async def measure(path: Path, ids: list[int], runs: int) -> dict[str, dict[str, float]]:
    out: dict[str, list[float]] = {"preview": [], "forget_evidence": [], "forget_everywhere": []}
    picks = iter(ids[len(ids) // 3 :])
    async with await MemoryStore.open(path) as store:
        for _ in range(runs):
            memory_id = next(picks)
            started = time.perf_counter()
            preview = await store.forget_preview(memory_id)
            out["preview"].append(time.perf_counter() - started)
            assert preview.everywhere, preview
            started = time.perf_counter()
            await store.forget(next(picks), scope="evidence")
            out["forget_evidence"].append(time.perf_counter() - started)
            started = time.perf_counter()
            report = await store.forget(memory_id)
            out["forget_everywhere"].append(time.perf_counter() - started)
            assert report.redacted_messages >= 2 and not report.scrub_pending, report
    return {
        name: {"median_ms": statistics.median(v) * 1000, "max_ms": max(v) * 1000}
        for name, v in out.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument(
        "--accented",
        action="store_true",
        help="non-ASCII text in most messages: the worst case, where SQLite cannot pre-filter",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory.db"
        started = time.perf_counter()
        ids = asyncio.run(build(path, args.messages, args.accented))
        built = time.perf_counter() - started
        results = asyncio.run(measure(path, ids, args.runs))
        size = path.stat().st_size
    doc = {"messages": args.messages, "accented": args.accented, "build_s": round(built, 1)}
    doc["file_mb"] = round(size / 2**20, 1)
    doc |= {k: {n: round(x, 1) for n, x in v.items()} for k, v in results.items()}
    print(json.dumps(doc, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
