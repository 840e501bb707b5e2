"""For tests of what a forget or a session delete owes the profile's copies: whether a file
(with its write-ahead log) still holds a text, a store call cut short by a process that
dies just before the copies are reached, and a session that began before a forget."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from navi_desktop.memory.store import MemoryStore

CUT_SHORT = """
import asyncio, os, sys
from navi_desktop.memory.forget_copies import CopyScrubOps
from navi_desktop.memory.store import MemoryStore

async def stop_here(*args, **kwargs):
    os._exit(9)  # the process dies between the saved change and its copies

async def main(path, method, arg):
    store = await MemoryStore.open(path)
    setattr(CopyScrubOps, {step!r}, stop_here)
    await getattr(store, method)(int(arg) if arg.isdigit() else arg)

asyncio.run(main(*sys.argv[1:]))
"""


def holds(path: Path, text: str, *, any_case: bool = False) -> bool:
    """Whether the file or its write-ahead log holds ``text`` (``any_case``: in any case)."""

    def fold(data: bytes) -> bytes:
        return data.lower() if any_case else data

    return any(
        fold(text.encode()) in fold(p.read_bytes())
        for p in (path, path.with_name(path.name + "-wal"))
        if p.exists()
    )


async def said_then_forgotten(
    store: MemoryStore, value: str, key: str = "secret"
) -> tuple[Any, str]:
    """A session whose first message came before the memory ``value`` was forgotten: the
    session, and when that message was said."""
    session = await store.create_session()
    added = (await store.add_memory(value, key=key)).memory
    before = (await store.save_message(session.id, "user", "hello")).created_at
    await store.forget(added.id)
    return session, before


def cut_short(path: Path, method: str, arg: object, step: str) -> None:
    """``store.method(arg)`` in a process killed when it reaches ``CopyScrubOps.step``."""
    script = textwrap.dedent(CUT_SHORT).replace("{step!r}", repr(step))
    done = subprocess.run(
        [sys.executable, "-c", script, str(path), method, str(arg)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 9, done.stderr
