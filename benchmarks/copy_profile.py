"""How long ``navi memory migrate`` takes: a SQLite profile copied into a local PostgreSQL
(pgserver) and back, with vectors of every memory and message.

    python benchmarks/copy_profile.py --messages 20000 --memories 10000
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from navi_desktop.memory import MemoryStore, NewMemory
from navi_desktop.memory.copy_profile import copy_profile
from tests.fakes import BagOfWordsEmbedder


async def build(store: MemoryStore, messages: int, memories: int) -> None:
    per_session = 50
    for s in range(max(1, messages // per_session)):
        await store.create_session(session_id=f"s{s}")
        for i in range(per_session):
            role = "user" if i % 2 == 0 else "assistant"
            text = f"message {i} of session {s} about topic{(s * 50 + i) % 997} and Person{i % 37}"
            await store.save_message(f"s{s}", role, text)
    batch = [
        NewMemory(value=f"value {i} word{i % 501}", category="other", key=f"key {i}")
        for i in range(memories)
    ]
    for i in range(0, memories, 1000):
        await store.add_memories(batch[i : i + 1000])
    await store.backfill_embeddings(batch=256)


async def main(args: argparse.Namespace) -> None:
    from navi_desktop.cli.server import import_pgserver
    from navi_desktop.memory.pg import PgMemoryStore

    folder = Path(tempfile.mkdtemp(prefix="navi-copy-"))
    # A folder of its own: run as root, pgserver starts PostgreSQL as another user.
    server = import_pgserver().get_server(
        tempfile.mkdtemp(prefix="navi-copy-pg-"), cleanup_mode="delete"
    )
    embedder = BagOfWordsEmbedder(dim=args.dim)
    try:
        async with await MemoryStore.open(folder / "source.db", embedder=embedder) as source:
            await build(source, args.messages, args.memories)
            async with await PgMemoryStore.open(server.get_uri(), "bench") as there:
                start = time.perf_counter()
                report = await copy_profile(source, there)
                print(f"sqlite -> postgres: {time.perf_counter() - start:.1f} s {report.counts}")
                async with await MemoryStore.open(folder / "back.db") as back:
                    start = time.perf_counter()
                    await copy_profile(there, back)
                    print(f"postgres -> sqlite: {time.perf_counter() - start:.1f} s")
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--memories", type=int, default=10000)
    parser.add_argument("--dim", type=int, default=384)
    asyncio.run(main(parser.parse_args()))
