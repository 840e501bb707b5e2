"""A memory file whose writer was killed mid-work (its log left beside it, with saves not
yet in the file), and the memories a file holds."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from navi_desktop.memory.store import MemoryStore

NAVI_WRITER = """
import asyncio, os, sys
from navi_desktop.memory.store import MemoryStore

async def main(path, text):
    store = await MemoryStore.open(path)
    await store.add_memory(text)
    os._exit(9)  # killed: the log stays, with the save not yet in the file

asyncio.run(main(*sys.argv[1:]))
"""


def log(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def killed(path: Path, text: str, writer: str = NAVI_WRITER) -> None:
    """``writer`` (a script given the file and ``text``; by default Navi adding ``text`` as a
    memory) run on ``path`` and killed before it closes it: its log stays."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(writer), str(path), text],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 9, done.stderr.decode()
    assert log(path).stat().st_size > 0


async def values(path: Path) -> list[str]:
    async with await MemoryStore.open(path) as store:
        memories, _ = await store.list_memories()
        return sorted(m.value for m in memories)
