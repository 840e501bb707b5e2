"""What the profile checks and backups cost on a large profile.

    python benchmarks/profile_safety.py [--memories 10000] [--runs 15] [--json OUT]

In a throw-away folder, builds a profile of N synthetic facts (the generator of
``search_scale.py``, with a message per ten facts so the file has both tables), then reports:

1. Opening it (``MemoryStore.open`` then ``close``), p50 / max over the runs, and the part
   of it spent on the checks made before anything may write to the file: the header check
   (``check_file``) and the read-only probe of its schema (``probe`` with the schema
   version check). The first run is left out (it warms the page cache).
2. ``navi memory backup``'s copy (``make_backup``, SQLite's online backup API): seconds
   and MB, p50 / max over 5 runs.
3. ``navi memory doctor`` on it (``examine``: the integrity check reads every page).
4. ``navi memory doctor --recover`` on a copy truncated to half: seconds, rows recovered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from search_scale import SEED, synthetic_facts  # noqa: E402

from navi_desktop.memory import MemoryStore  # noqa: E402


async def build(path: Path, n: int) -> None:
    store = await MemoryStore.open(path)
    try:
        facts = synthetic_facts(n, random.Random(SEED))
        sid = (await store.create_session("bench")).id
        for start in range(0, n, 1000):
            await store.add_memories(facts[start : start + 1000])
        for j in range(0, n, 10):
            await store.save_message(sid, "user", f"message {j}: {facts[j].value}")
    finally:
        await store.close()


def ms(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 2), "max": round(max(values), 2)}


async def opens(path: Path, runs: int) -> dict[str, Any]:
    totals, checks = [], []
    try:
        from navi_desktop.memory.filecheck import check_file, probe
        from navi_desktop.memory.migrations import check_schema
    except ImportError:  # the code before the checks: only the total
        check_file = None
    for _ in range(runs + 1):
        if check_file is not None:
            started = time.perf_counter()
            check_file(path)
            await asyncio.to_thread(probe, path, check_schema)
            checks.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        store = await MemoryStore.open(path)
        totals.append((time.perf_counter() - started) * 1000)
        await store.close()
    out: dict[str, Any] = {"open_ms": ms(totals[1:])}
    if checks:
        out["checks_ms"] = ms(checks[1:])
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="navi-safety-"))
    try:
        path = folder / "profiles" / "bench" / "memory.db"
        path.parent.mkdir(parents=True)
        started = time.perf_counter()
        asyncio.run(build(path, args.memories))
        result: dict[str, Any] = {
            "memories": args.memories,
            "build_s": round(time.perf_counter() - started, 1),
            "file_mb": round(path.stat().st_size / 1e6, 1),
        }
        result |= asyncio.run(opens(path, args.runs))
        try:
            from navi_desktop.memory.backup import make_backup
            from navi_desktop.memory.doctor import examine
            from navi_desktop.memory.salvage import recover
        except ImportError:
            return result
        seconds = []
        for i in range(5):
            made = make_backup(path, folder / f"backup-{i}.db")
            seconds.append(made.seconds)
        result["backup_s"] = {
            k: round(v / 1000, 3) for k, v in ms([s * 1000 for s in seconds]).items()
        }
        result["backup_mb"] = round(made.bytes / 1e6, 1)
        started = time.perf_counter()
        report = examine(path)
        result["doctor_s"] = round(time.perf_counter() - started, 2)
        result["doctor_ok"] = report.ok
        damaged = folder / "damaged" / "memory.db"
        damaged.parent.mkdir()
        data = path.read_bytes()
        damaged.write_bytes(data[: len(data) // 2])
        salvage = asyncio.run(recover(damaged))
        result["recover_half_s"] = round(salvage.seconds, 2)
        result["recovered"] = {
            k: v for k, v in salvage.copied.items() if k in ("memories", "messages")
        }
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", metavar="OUT", help="also write the figures to OUT")
    args = parser.parse_args(argv)
    result = run(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
