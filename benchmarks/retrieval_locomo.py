"""Turn-level evidence recall on LoCoMo, through the engine's own API, tuned and held back.

Each conversation becomes one profile: its sessions become sessions and its turns messages
(``store.save_message``, speaker as the message name, the session's date as its time, a shared
photo's caption appended as ``[shares …]``). Every question is asked through ``store.search``
over messages, and recall@k is the share of the question's evidence turns in the top k.

    python benchmarks/retrieval_locomo.py --data ../shared/data/locomo-dev.json --json out.json

One run reports three things:

* the shipped constants (``search.Tuning()``) on every conversation;
* cross-validation by conversation: for each conversation held out in turn, the constants of
  ``GRID`` that score best (R@10) on the other conversations are picked, and measured both on
  those ("tuned") and on the held-out one ("held back"); the figures pool every fold. A change
  that raises the tuned figure and not the held-back one is fit to the data, not progress;
* ``--unseen FILE``: conversations never tuned on, measured with the shipped constants.

Categories use LoCoMo's own naming (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
5 adversarial); the overall figures cover categories 1–4. Malformed evidence ids are repaired
("D8:6; D9:17" → two ids, "D:11:26" → "D11:26", "D30:05" → "D30:5"); ids naming no turn are
dropped and counted in the output. ``--embed-cache FILE`` keeps the vectors between runs (for
tuning); search latency is then not a measure of the query's embedding and is not reported.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from navi_desktop.memory import MemoryStore
from navi_desktop.memory.embedders import Embedder, embedder_by_name
from navi_desktop.memory.search import Tuning

CATEGORY_NAMES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
MAIN = (1, 2, 3, 4)


def _weight(name: str) -> Callable[[Tuning, float], Tuning]:
    def set_weight(t: Tuning, value: float) -> Tuning:
        return replace(t, weights=tuple((n, value if n == name else w) for n, w in t.weights))

    return set_weight


# The constants cross-validation may pick from, each with the values it tries (the shipped
# value among them). Every combination is measured on every conversation once.
GRID: dict[str, tuple[Sequence[Any], Callable[[Tuning, Any], Tuning]]] = {
    "context": ((0.5, 1.0), lambda t, v: replace(t, message_columns=(1.0, v))),
    "session": ((0.0, 1.0), _weight("session")),
    "author": ((1.0, 1.25, 1.5), lambda t, v: replace(t, author_boost=v)),
    "time": ((1.0, 1.25), lambda t, v: replace(t, time_boost=v)),
}


def grid() -> list[dict[str, Any]]:
    names = list(GRID)
    return [
        dict(zip(names, values, strict=True))
        for values in itertools.product(*(GRID[n][0] for n in names))
    ]


def tuning_of(point: dict[str, Any]) -> Tuning:
    t = Tuning()
    for name, value in point.items():
        t = GRID[name][1](t, value)
    return t


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


class CachedEmbedder:
    """An embedder whose vectors are kept in a file between runs (tuning only)."""

    def __init__(self, inner: Embedder, path: Path) -> None:
        self.inner, self.path, self.model = inner, path, inner.model
        self.vectors: dict[str, np.ndarray] = {}
        if path.exists():
            with np.load(path) as saved:
                self.vectors = dict(zip(saved["keys"].tolist(), saved["vectors"], strict=True))

    async def embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        keys = [("q:" if query else "p:") + t for t in texts]
        missing = [t for t, k in zip(texts, keys, strict=True) if k not in self.vectors]
        if missing:
            fresh = await self.inner.embed(missing, query=query)
            for t, v in zip(missing, fresh, strict=True):
                self.vectors[("q:" if query else "p:") + t] = v
        return np.stack([self.vectors[k] for k in keys]) if keys else np.zeros((0, 384))

    def save(self) -> None:
        keys = list(self.vectors)
        np.savez(self.path, keys=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys]))


@dataclass
class Conversation:
    sample_id: str
    store: MemoryStore
    dia_of: dict[int, str]  # message id -> dialog id
    questions: list[tuple[str, int, list[str]]] = field(default_factory=list)
    dropped: int = 0  # evidence ids naming no turn


async def ingest(store: MemoryStore, conversation: dict) -> dict[int, str]:
    """Load one conversation; returns message id -> dialog id."""
    numbers = sorted(int(k.split("_")[1]) for k in conversation if re.fullmatch(r"session_\d+", k))
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


async def load(sample: dict, embedder: Embedder | None, root: Path) -> Conversation:
    store = await MemoryStore.open(root / sample["sample_id"] / "memory.db", embedder=embedder)
    dia_of = await ingest(store, sample["conversation"])
    await store.backfill_embeddings(batch=64)
    conv = Conversation(sample["sample_id"], store, dia_of)
    known = set(dia_of.values())
    for qa in sample["qa"]:
        wanted = evidence_ids(qa.get("evidence", []))
        conv.dropped += sum(1 for e in wanted if e not in known)
        wanted = [e for e in dict.fromkeys(wanted) if e in known]
        if wanted:
            conv.questions.append((qa["question"], int(qa["category"]), wanted))
    return conv


Record = tuple[str, int, float, float]  # conversation, category, recall@5, recall@10


async def measure(
    conv: Conversation,
    tuning: Tuning,
    categories: Sequence[int] = MAIN,
    latencies: list[float] | None = None,
) -> list[Record]:
    conv.store.tuning = tuning
    out = []
    for question, category, wanted in conv.questions:
        if category not in categories:
            continue
        t0 = time.perf_counter()
        hits = await conv.store.search(question, kinds=["message"], limit=10)
        if latencies is not None:
            latencies.append((time.perf_counter() - t0) * 1000)
        ranked = [conv.dia_of[h.id] for h in hits]
        r5, r10 = (len(set(ranked[:k]) & set(wanted)) / len(wanted) for k in (5, 10))
        out.append((conv.sample_id, category, r5, r10))
    return out


def pct(values: Sequence[float]) -> float:
    return round(100 * statistics.fmean(values), 1) if values else 0.0


def summary(records: Sequence[Record]) -> dict[str, Any]:
    main = [r for r in records if r[1] in MAIN]
    cats = sorted({r[1] for r in records})
    return {
        "questions": len(main),
        "recall_at_5": pct([r[2] for r in main]),
        "recall_at_10": pct([r[3] for r in main]),
        "per_category": {
            f"{c} {CATEGORY_NAMES[c]}": {
                "questions": sum(1 for r in records if r[1] == c),
                "recall_at_5": pct([r[2] for r in records if r[1] == c]),
                "recall_at_10": pct([r[3] for r in records if r[1] == c]),
            }
            for c in cats
        },
    }


RANK_BUCKETS = ((10, "1-10"), (20, "11-20"), (50, "21-50"), (200, "51-200"))


async def evidence_ranks(convs: list[Conversation]) -> dict[str, dict[str, int]]:
    """Where each evidence turn ranks in the shipped method's first 200 hits, per category:
    a miss just past the cut is a re-ranking's to win, one far down or absent is not."""
    out: dict[str, dict[str, int]] = {}
    for conv in convs:
        conv.store.tuning = Tuning()
        for question, category, wanted in conv.questions:
            if category not in MAIN:
                continue
            hits = await conv.store.search(question, kinds=["message"], limit=200)
            ranked = [conv.dia_of[h.id] for h in hits]
            counts = out.setdefault(f"{category} {CATEGORY_NAMES[category]}", {})
            for turn in wanted:
                rank = ranked.index(turn) + 1 if turn in ranked else None
                name = next((n for top, n in RANK_BUCKETS if rank and rank <= top), "not in 200")
                counts[name] = counts.get(name, 0) + 1
    return out


async def cross_validate(convs: list[Conversation]) -> dict[str, Any]:
    """Pick the grid point best on all conversations but one, measure it on both sides."""
    points = grid()
    scored = {}  # (point index, conversation) -> records
    for i, point in enumerate(points):
        for conv in convs:
            scored[i, conv.sample_id] = await measure(conv, tuning_of(point))
    shipped = next(i for i, p in enumerate(points) if tuning_of(p) == Tuning())
    tuned: list[Record] = []
    held: list[Record] = []
    folds = []
    for out in convs:
        others = [c.sample_id for c in convs if c is not out]

        def fit(i: int, others: list[str] = others) -> tuple[float, float, bool]:
            pooled = [r for s in others for r in scored[i, s]]
            return (
                statistics.fmean(r[3] for r in pooled),
                statistics.fmean(r[2] for r in pooled),
                i == shipped,
            )  # ties go to the shipped constants

        best = max(range(len(points)), key=fit)
        fold_tuned = [r for s in others for r in scored[best, s]]
        tuned += fold_tuned
        held += scored[best, out.sample_id]
        folds.append(
            {
                "held_out": out.sample_id,
                "picked": points[best],
                "tuned_recall_at_10": pct([r[3] for r in fold_tuned]),
                "held_back_recall_at_10": pct([r[3] for r in scored[best, out.sample_id]]),
            }
        )
    return {
        "grid_points": len(points),
        "folds": folds,
        "tuned": summary(tuned),
        "held_back": summary(held),
    }


async def run(
    data: list[dict],
    unseen: list[dict],
    embedder: Embedder | None,
    root: Path,
    timed: bool,
    ranks: bool = False,
) -> dict[str, Any]:
    convs = [await load(s, embedder, root / "dev") for s in data]
    others = [await load(s, embedder, root / "unseen") for s in unseen]
    try:
        latencies: list[float] = []
        shipped = [r for c in convs for r in await measure(c, Tuning(), (*MAIN, 5), latencies)]
        result: dict[str, Any] = {
            "embedder": embedder.model if embedder else None,
            "conversations": [c.sample_id for c in convs],
            "shipped": summary(shipped),
            "evidence_ids_dropped": sum(c.dropped for c in (*convs, *others)),
        }
        if timed:
            latencies.sort()
            result["search_ms_p50"] = round(statistics.median(latencies), 2)
            result["search_ms_p95"] = round(latencies[int(0.95 * (len(latencies) - 1))], 2)
        if ranks:
            result["evidence_ranks"] = await evidence_ranks(convs)
        if len(convs) > 1:
            result["cross_validation"] = await cross_validate(convs)
        if others:
            result["unseen_conversations"] = [c.sample_id for c in others]
            result["unseen"] = summary([r for c in others for r in await measure(c, Tuning())])
        return result
    finally:
        for conv in (*convs, *others):
            await conv.store.close()


def table(title: str, figures: dict[str, Any]) -> None:
    print(
        f"{title}: R@5 {figures['recall_at_5']}  R@10 {figures['recall_at_10']}"
        f"  ({figures['questions']} questions, categories 1-4)"
    )
    for cat, f in figures["per_category"].items():
        print(
            f"  {cat:<15} n={f['questions']:<4} R@5 {f['recall_at_5']:>5}"
            f"  R@10 {f['recall_at_10']:>5}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="LoCoMo JSON file")
    parser.add_argument("--unseen", type=Path, help="LoCoMo conversations never tuned on")
    parser.add_argument(
        "--embedder",
        default="auto",
        help="'local' (offline e5-small), 'none' (text only) or 'auto'"
        " (the best offline embedder installed)",
    )
    parser.add_argument("--embed-cache", type=Path, help="keep vectors here between runs")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--ranks", action="store_true", help="where the evidence ranks in the first 200 hits"
    )
    args = parser.parse_args()
    data = json.loads(args.data.read_text())
    unseen = json.loads(args.unseen.read_text()) if args.unseen else []
    embedder = embedder_by_name(args.embedder)
    cache = None
    if embedder is not None and args.embed_cache:
        embedder = cache = CachedEmbedder(embedder, args.embed_cache)
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(
            run(data, unseen, embedder, Path(tmp), timed=cache is None, ranks=args.ranks)
        )
    if cache is not None:
        cache.save()
    print(f"embedder {result['embedder']}, conversations {', '.join(result['conversations'])}")
    table("shipped constants, all conversations", result["shipped"])
    if "search_ms_p50" in result:
        print(f"search latency p50 {result['search_ms_p50']} ms, p95 {result['search_ms_p95']} ms")
    for cat, counts in result.get("evidence_ranks", {}).items():
        spread = ", ".join(f"{n}: {counts.get(n, 0)}" for n in (*dict(RANK_BUCKETS).values(),))
        print(f"evidence ranks, {cat:<15} {spread}, not in 200: {counts.get('not in 200', 0)}")
    if "cross_validation" in result:
        cv = result["cross_validation"]
        for fold in cv["folds"]:
            print(
                f"held out {fold['held_out']}: picked {fold['picked']}, R@10 tuned"
                f" {fold['tuned_recall_at_10']}, held back {fold['held_back_recall_at_10']}"
            )
        table("cross-validated, tuned", cv["tuned"])
        table("cross-validated, held back", cv["held_back"])
    if "unseen" in result:
        table(f"unseen ({', '.join(result['unseen_conversations'])})", result["unseen"])
    print(f"evidence ids dropped: {result['evidence_ids_dropped']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
