"""Entity accuracy on 100 hand-labelled sentences: the regex fast path alone, and the regex
plus the model's entity pass (what maintenance adds), as precision and recall.

    python benchmarks/entity_accuracy.py                      # regex alone
    python benchmarks/entity_accuracy.py --host http://127.0.0.1:11500 --model smollm2:135m

``benchmarks/data/entities.jsonl``: one sentence per line with its entities (name, type):
people, organisations, projects and locations, lower-case chat text, sentences with none,
a few not in English. A found name counts when it equals a labelled one after normalising
(case, accents kept); a multi-word name found in pieces counts as wrong, as it links
nothing useful. With ``--host``, the sentences go through the same requests maintenance
sends (``pipeline/entity_pass.py``: batches of 8, the same grounding), against any
Ollama-compatible server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from navi_desktop.memory.textproc import entity_names, normalize  # noqa: E402
from navi_desktop.pipeline.entity_pass import BATCH, find_entities  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "entities.jsonl"


def score(found: list[set[str]], gold: list[set[str]]) -> dict[str, float]:
    hits = sum(len(f & g) for f, g in zip(found, gold, strict=True))
    offered = sum(len(f) for f in found)
    labelled = sum(len(g) for g in gold)
    return {
        "precision": hits / offered if offered else 1.0,
        "recall": hits / labelled if labelled else 1.0,
        "found": offered,
        "correct": hits,
        "labelled": labelled,
    }


async def model_names(host: str, model: str, texts: list[str]) -> tuple[list[set[str]], float]:
    from navi_desktop.llm.backend import OllamaBackend
    from navi_desktop.pipeline.session_end import EndSettings

    settings = EndSettings(model=model)
    out: list[set[str]] = []
    started = time.perf_counter()
    async with OllamaBackend(host, timeout=600, background_timeout=600) as llm:
        for start in range(0, len(texts), BATCH):
            batch = texts[start : start + BATCH]
            try:
                found = await find_entities(llm, settings, batch)
            except Exception as exc:  # a failed batch finds nothing, as in maintenance
                print(f"batch {start // BATCH + 1}: {exc}", file=sys.stderr)
                found = [[] for _ in batch]
            out += [{normalize(n) for n, _ in pairs} for pairs in found]
    return out, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", help="an Ollama-compatible server for the model pass")
    parser.add_argument("--model", default="llama3.2")
    parser.add_argument("--json", metavar="OUT", help="write the figures as JSON")
    args = parser.parse_args()
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    texts = [r["text"] for r in rows]
    gold = [{normalize(n) for n, _ in r["entities"]} for r in rows]
    regex = [{normalize(n) for n in entity_names(t)} for t in texts]
    results = {"sentences": len(rows), "regex": score(regex, gold)}
    if args.host:
        model, seconds = asyncio.run(model_names(args.host, args.model, texts))
        results["model"] = args.model
        results["regex+model"] = score([r | m for r, m in zip(regex, model, strict=True)], gold)
        results["model_seconds"] = round(seconds, 1)
    print(f"{len(rows)} sentences, {results['regex']['labelled']} labelled entities")
    print("| pass | precision | recall | found | correct |")
    print("|---|---|---|---|---|")
    for name in ("regex", "regex+model"):
        if name in results:
            r = results[name]
            print(
                f"| {name} | {r['precision']:.2f} | {r['recall']:.2f} | {r['found']}"
                f" | {r['correct']} |"
            )
    if "model_seconds" in results:
        print(f"model pass: {results['model']}, {results['model_seconds']} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
