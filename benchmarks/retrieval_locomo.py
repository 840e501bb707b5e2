"""Turn-level evidence recall on LoCoMo, through the engine's own API.

Each conversation becomes one profile: its sessions become sessions and its turns messages
(``store.save_message``, speaker as the message name, the session's date as its time, a shared
photo's caption appended as ``[shares …]``). Every question is asked through ``store.search``
over messages, and recall@k is the share of the question's evidence turns in the top k.

    python benchmarks/retrieval_locomo.py --data ../shared/data/locomo-dev.json --json out.json

Categories use LoCoMo's own naming (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
5 adversarial); the overall figures cover categories 1–4. Malformed evidence ids are repaired
("D8:6; D9:17" → two ids, "D:11:26" → "D11:26", "D30:05" → "D30:5"); ids naming no turn are
dropped and counted in the output.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from navi_desktop.memory import MemoryStore
from navi_desktop.memory.embedders import Embedder, embedder_by_name

CATEGORY_NAMES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}


def session_time(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> aware datetime."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def evidence_ids(raw: list[str]) -> list[str]:
    out = []
    for item in raw:
        for part in re.split(r"[;,\s]+", item):
            m = re.fullmatch(r"D:?(\d+):0*(\d+)", part.strip())
            if m:
                out.append(f"D{int(m.group(1))}:{int(m.group(2))}")
    return out


async def ingest(store: MemoryStore, conversation: dict) -> dict[int, str]:
    """Load one conversation; returns message id -> dialog id."""
    speakers = conversation
    numbers = sorted(int(k.split("_")[1]) for k in speakers if re.fullmatch(r"session_\d+", k))
    dia_of: dict[int, str] = {}
    for n in numbers:
        start = session_time(conversation[f"session_{n}_date_time"])
        session = await store.create_session(f"session {n}", at=start.isoformat())
        for i, turn in enumerate(conversation[f"session_{n}"]):
            text = turn["text"]
            if turn.get("blip_caption"):
                text += f" [shares {turn['blip_caption']}]"
            when = (start + timedelta(seconds=i)).isoformat()
            msg = await store.save_message(session.id, "user", text, name=turn["speaker"], at=when)
            dia_of[msg.id] = turn["dia_id"]
    return dia_of


async def run(data: list[dict], embedder: Embedder | None, root: Path) -> dict:
    per_cat: dict[int, list[tuple[float, float]]] = {}
    latencies: list[float] = []
    dropped = 0
    for sample in data:
        store = await MemoryStore.open(root / sample["sample_id"] / "memory.db", embedder=embedder)
        try:
            dia_of = await ingest(store, sample["conversation"])
            known = set(dia_of.values())
            await store.backfill_embeddings(batch=64)
            for qa in sample["qa"]:
                wanted = evidence_ids(qa.get("evidence", []))
                dropped += sum(1 for e in wanted if e not in known)
                wanted = [e for e in dict.fromkeys(wanted) if e in known]
                if not wanted:
                    continue
                t0 = time.perf_counter()
                hits = await store.search(qa["question"], kinds=["message"], limit=10)
                latencies.append((time.perf_counter() - t0) * 1000)
                ranked = [dia_of[h.id] for h in hits]
                recall = [len(set(ranked[:k]) & set(wanted)) / len(wanted) for k in (5, 10)]
                per_cat.setdefault(int(qa["category"]), []).append((recall[0], recall[1]))
        finally:
            await store.close()

    def pct(values: list[float]) -> float:
        return round(100 * statistics.fmean(values), 1) if values else 0.0

    main = [r for c in (1, 2, 3, 4) for r in per_cat.get(c, [])]
    latencies.sort()
    return {
        "embedder": embedder.model if embedder else None,
        "recall_at_5": pct([r[0] for r in main]),
        "recall_at_10": pct([r[1] for r in main]),
        "questions": len(main),
        "per_category": {
            f"{c} {CATEGORY_NAMES[c]}": {
                "questions": len(per_cat[c]),
                "recall_at_5": pct([r[0] for r in per_cat[c]]),
                "recall_at_10": pct([r[1] for r in per_cat[c]]),
            }
            for c in sorted(per_cat)
        },
        "search_ms_p50": round(statistics.median(latencies), 2),
        "search_ms_p95": round(latencies[int(0.95 * (len(latencies) - 1))], 2),
        "evidence_ids_dropped": dropped,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="LoCoMo JSON file")
    parser.add_argument(
        "--embedder",
        default="auto",
        help="'local' (offline e5-small), 'none' (text only) or 'auto'"
        " (the best offline embedder installed)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    data = json.loads(args.data.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(run(data, embedder_by_name(args.embedder), Path(tmp)))
    print(
        f"embedder {result['embedder']}: R@5 {result['recall_at_5']}  "
        f"R@10 {result['recall_at_10']}  ({result['questions']} questions, categories 1-4)"
    )
    for cat, figures in result["per_category"].items():
        print(
            f"  {cat:<15} n={figures['questions']:<4} R@5 {figures['recall_at_5']:>5}"
            f"  R@10 {figures['recall_at_10']:>5}"
        )
    print(f"search latency p50 {result['search_ms_p50']} ms, p95 {result['search_ms_p95']} ms")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
