"""Tune the cosine floor that search applies to hits only the vector signal found.

    python benchmarks/tune_search_floor.py --data ../shared/data/locomo-dev.json

Embeds (with the offline embedder) LoCoMo questions with their evidence turns (related) and
with turns of another conversation (unrelated), plus a few made-up facts against questions
about them and against gibberish, and prints the cosine percentiles of each and the share of
each kept at candidate floors. The chosen value goes in ``search.VECTOR_FLOOR``: it should
drop nearly all unrelated and gibberish pairs; related ones that share words or names with the
query are kept by the other signals whatever their cosine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.retrieval_locomo import evidence_ids
from navi_desktop.memory.embedders import LocalEmbedder

FACTS = [  # as the store embeds them: "key: value"
    "drink: green tea, no sugar",
    "home city: Lisbon",
    "languages: Rust and Python",
    "next trip: a bike trip to Porto in May",
]
QUESTIONS = ["what tea do I like?", "where do I live?", "which languages do I code in?"]
GIBBERISH = ["zzzqqq", "asdf qwer", "xkcd 12345", "???", "lorem ipsum"]
PAIRS = 400


def pairs(data: list[dict], rng: random.Random) -> tuple[list[str], list[str], list[str]]:
    """(questions, their evidence turns, a turn of another conversation for each)."""
    questions, related, turns_by_conv = [], [], []
    for conv in data:
        turns = {
            t["dia_id"]: t["text"]
            for key, session in conv["conversation"].items()
            if key.startswith("session_") and isinstance(session, list)
            for t in session
        }
        turns_by_conv.append(list(turns.values()))
        for qa in conv["qa"]:
            if qa.get("category") in (1, 2, 3, 4):
                for ev in evidence_ids(qa.get("evidence", [])):
                    if ev in turns:
                        questions.append((len(turns_by_conv) - 1, qa["question"]))
                        related.append(turns[ev])
    chosen = rng.sample(range(len(questions)), min(PAIRS, len(questions)))
    q = [questions[i][1] for i in chosen]
    r = [related[i] for i in chosen]
    n = len(turns_by_conv)
    u = [rng.choice(turns_by_conv[(questions[i][0] + 1) % n]) for i in chosen]
    return q, r, u


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="LoCoMo JSON file")
    args = parser.parse_args()
    embedder = LocalEmbedder()
    q, r, u = pairs(json.loads(args.data.read_text()), random.Random(1))
    queries = await embedder.embed(q, query=True)
    related = np.sum(queries * await embedder.embed(r, query=False), axis=1)
    unrelated = np.sum(queries * await embedder.embed(u, query=False), axis=1)
    facts = await embedder.embed(FACTS, query=False)
    asked = (await embedder.embed(QUESTIONS, query=True)) @ facts.T
    right = asked[np.arange(len(QUESTIONS)), np.arange(len(QUESTIONS))]
    wrong = asked[~np.eye(len(QUESTIONS), len(FACTS), dtype=bool)]
    gibberish = ((await embedder.embed(GIBBERISH, query=True)) @ facts.T).ravel()
    print(f"{embedder.model}: cosine percentiles (5, 25, 50, 75, 95)")
    sets = {
        "LoCoMo related": related,
        "LoCoMo unrelated": unrelated,
        "fact asked about": right,
        "fact not asked": wrong,
        "gibberish": gibberish,
    }
    for name, sims in sets.items():
        cuts = np.percentile(sims, [5, 25, 50, 75, 95])
        print(f"  {name:<18} " + "  ".join(f"{c:.3f}" for c in cuts))
    print("share kept at floor: " + "  ".join(sets))
    for floor in np.arange(0.78, 0.871, 0.01):
        kept = "  ".join(f"{np.mean(s >= floor):>{len(n)}.0%}" for n, s in sets.items())
        print(f"  {floor:.2f}              {kept}")


if __name__ == "__main__":
    asyncio.run(main())
