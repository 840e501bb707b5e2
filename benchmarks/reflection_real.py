"""What a real model's weekly reflections become: stored, held for review, or left out.

    python benchmarks/reflection_real.py --host http://127.0.0.1:11500 --model smollm2:135m \
        [--seeds 1,2] [--personas benchmarks/data/personas] [--json OUT]

For each persona in ``benchmarks/data/personas/*.json``, its expected facts are written to a
throw-away profile file as active facts (family members as ``relationships``), and
``reflect()`` asks the model for insights once per seed, through the real backend. Each
insight is counted as stored, held for review (sensitive), or left out with its reason;
"unchecked" is what the reflection stored before insights were checked (every non-empty
string). Prints a Markdown table and the reasons; ``--json`` writes every insight.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from navi_desktop.llm.backend import OllamaBackend  # noqa: E402
from navi_desktop.memory.store import MemoryStore  # noqa: E402
from navi_desktop.pipeline.maintenance import reflect  # noqa: E402
from navi_desktop.pipeline.session_end import EndSettings  # noqa: E402

PERSONAS = ROOT / "benchmarks" / "data" / "personas"
FAMILY = {"daughter", "son", "wife", "husband", "partner", "sister", "brother", "mother", "father"}


async def one(spec: dict[str, Any], backend: OllamaBackend, model: str, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        async with await MemoryStore.open(Path(tmp) / "memory.db", embedder=None) as store:
            for fact in spec["expect"]:
                category = "relationships" if fact["what"] in FAMILY else "other"
                await store.add_memory(fact["values"][0], key=fact["what"], category=category)
            dropped: list[str] = []
            started = time.perf_counter()
            settings = EndSettings(model=model, options={"seed": seed})
            await reflect(store, backend, settings, dropped=dropped)
            seconds = time.perf_counter() - started
            kept, _ = await store.list_memories(kind="reflection", status=None, limit=50)
    return {
        "persona": spec["name"],
        "seed": seed,
        "seconds": round(seconds, 1),
        "stored": [m.value for m in kept if m.status == "active"],
        "held": [m.value for m in kept if m.status == "held"],
        "dropped": dropped,
    }


async def run(args: argparse.Namespace) -> list[dict]:
    specs = [json.loads(p.read_text()) for p in sorted(Path(args.personas).glob("*.json"))]
    seeds = [int(s) for s in args.seeds.split(",")]
    out = []
    async with OllamaBackend(args.host, timeout=600, background_timeout=600) as backend:
        for spec in specs:
            if len(spec.get("expect") or []) < 3:
                continue  # a reflection needs three new facts
            for seed in seeds:
                try:
                    out.append(await one(spec, backend, args.model, seed))
                except Exception as exc:  # a failed request: counted, the run goes on
                    out.append({"persona": spec["name"], "seed": seed, "error": str(exc)})
                print(json.dumps(out[-1], ensure_ascii=False), file=sys.stderr)
    return out


def report(model: str, results: list[dict]) -> str:
    ok = [r for r in results if "error" not in r]
    stored = sum(len(r["stored"]) for r in ok)
    held = sum(len(r["held"]) for r in ok)
    dropped = sum(len(r["dropped"]) for r in ok)
    # Before the checks every non-empty string was stored (what "dropped" holds as "not a
    # sentence" was not).
    strings = sum(1 for r in ok for d in r["dropped"] if "not a sentence" not in d)
    unchecked = stored + held + strings
    reasons = Counter(d.rsplit(": ", 1)[-1].split(" (")[0] for r in ok for d in r["dropped"])
    seconds = sorted(r["seconds"] for r in ok)
    median = seconds[len(seconds) // 2] if seconds else "-"
    lines = [
        f"| {model} | reflections | insights offered | stored | held | left out | unchecked"
        " would store | failed requests | median s |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| | {len(ok)} | {stored + held + dropped} | {stored} | {held} | {dropped} |"
        f" {unchecked} | {len(results) - len(ok)} | {median} |",
        "",
        "Left out: " + "; ".join(f"{why} ×{n}" for why, n in reasons.most_common()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--personas", default=str(PERSONAS))
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    results = asyncio.run(run(args))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, ensure_ascii=False))
    print(report(args.model, results))


if __name__ == "__main__":
    main()
