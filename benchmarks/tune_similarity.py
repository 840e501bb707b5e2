"""Tune the cosine threshold that reconciliation uses to call two fact values the same.

    python benchmarks/tune_similarity.py [--pairs benchmarks/data/fact_pairs.json]

For each labelled pair (same fact reworded / value changed), embeds both values with the
offline embedder and prints each pair's cosine and token Jaccard, then the best threshold,
its accuracy, and how many changed values it calls the same. Reconciliation compares by
text first (Jaccard >= ``reconcile.JACCARD_SAME``); only the pairs that leaves open need the
cosine, so both are shown. The result goes in ``reconcile.TUNED_COSINE``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import numpy as np

from navi_desktop.memory.embedders import LocalEmbedder
from navi_desktop.memory.textproc import jaccard


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pairs", type=Path, default=Path(__file__).parent / "data" / "fact_pairs.json"
    )
    args = parser.parse_args()
    pairs = json.loads(args.pairs.read_text())["pairs"]
    embedder = LocalEmbedder()
    left = await embedder.embed([p[0] for p in pairs], query=False)
    right = await embedder.embed([p[1] for p in pairs], query=False)
    sims = np.sum(left * right, axis=1)
    labels = np.array([p[2] == "same" for p in pairs])
    for (a, b, label), sim in sorted(zip(pairs, sims, strict=True), key=lambda x: -x[1]):
        print(f"{sim:.3f}  {label:<9}  jaccard {jaccard(a, b):.2f}  {a!r} / {b!r}")
    best = max(
        np.arange(0.80, 1.0, 0.005), key=lambda t: (np.mean((sims >= t) == labels), -abs(t - 0.93))
    )
    accuracy = np.mean((sims >= best) == labels)
    false_same = int(np.sum((sims >= best) & ~labels))
    print(
        f"\n{embedder.model}: best threshold {best:.3f}, accuracy {accuracy:.0%}"
        f" ({false_same} changed values called the same)"
    )


if __name__ == "__main__":
    asyncio.run(main())
