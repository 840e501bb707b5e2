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

# A process that stops at ``where``'s ``step`` ("module" or "module:Class"; "+step": after
# it): killed there, or (``wait``) waiting there until killed. What it runs (``action``)
# calls ``stop_at_the_step()`` where the step is to be replaced.
STOPPED = """
import asyncio, importlib, inspect, os, sys, time
from pathlib import Path

module, _, name = {where!r}.partition(":")
where = importlib.import_module(module)
where = getattr(where, name) if name else where
step = {step!r}
done = getattr(where, step.lstrip("+"))

def stop_here():
    if {wait!r}:
        print("writing", flush=True)
        time.sleep(120)
    os._exit(9)  # the process dies at the step

if inspect.iscoroutinefunction(done):
    async def stop(*args, **kwargs):
        if step.startswith("+"):
            await done(*args, **kwargs)
        stop_here()
else:
    def stop(*args, **kwargs):
        if step.startswith("+"):
            done(*args, **kwargs)
        stop_here()

def stop_at_the_step():
    setattr(where, step.lstrip("+"), stop)
"""

# ``store.method(arg)`` on the file ``sys.argv[1]``, the step replaced once it is open.
STORE_CALL = """
from navi_desktop.memory.store import MemoryStore

async def main(path, method, arg):
    store = await MemoryStore.open(path)
    stop_at_the_step()
    await getattr(store, method)(int(arg) if arg.isdigit() else arg)

asyncio.run(main(*sys.argv[1:]))
"""

# ``navi memory backup`` of ``sys.argv[1]``, or (given a second file) a restore of it there.
BACKUP_OR_RESTORE = """
from navi_desktop.memory.backup import make_backup
from navi_desktop.memory.restore import restore_file

stop_at_the_step()
path = Path(sys.argv[1])
make_backup(path) if len(sys.argv) == 2 else restore_file(Path(sys.argv[2]), path)
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


def stopped(
    where: str, step: str, action: str, *args: object, wait: bool = False
) -> subprocess.Popen[str]:
    """``action`` (with ``args`` as ``sys.argv[1:]``) in a process that stops at ``where``'s
    ``step`` (see STOPPED), started and not waited for."""
    script = textwrap.dedent(STOPPED).format(where=where, step=step, wait=wait)
    return subprocess.Popen(
        [sys.executable, "-c", script + textwrap.dedent(action), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def killed_at(where: str, step: str, action: str, *args: object) -> None:
    """``action`` in a process killed when it reaches ``where``'s ``step``."""
    done = stopped(where, step, action, *args)
    try:
        _, err = done.communicate(timeout=120)
    finally:
        done.kill()
    assert done.returncode == 9, err


def cut_short(path: Path, method: str, arg: object, step: str) -> None:
    """``store.method(arg)`` in a process killed when it reaches ``CopyScrubOps.step``."""
    where = "navi_desktop.memory.forget_copies:CopyScrubOps"
    killed_at(where, step, STORE_CALL, path, method, arg)


async def add_a_secret(path: Path, secret: str) -> int:
    """A profile at ``path`` holding "likes tea" and the vault code ``secret``: the code's
    memory id."""
    async with await MemoryStore.open(path) as store:
        await store.add_memory("likes tea")
        return (await store.add_memory(f"the vault code is {secret}")).memory.id
