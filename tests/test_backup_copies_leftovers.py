"""The temporary copy a killed backup or restore leaves is removed, never one still being
written. Before, `backups/.manual-<time>.db.<hex>.tmp` (a backup killed mid-copy) and
`.memory.db.restore-<hex>.tmp` (a restore killed mid-way) stayed for good: full copies of the
profile that no forget reached ("Removed from 3 backups" while they kept the text)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from navi_desktop.memory.backup import backups_dir, make_backup, remove_leftovers
from navi_desktop.memory.store import MemoryStore
from tests.copies_support import BACKUP_OR_RESTORE, add_a_secret, holds, killed_at, stopped
from tests.tui_support import DEAD_HOST, Daemon, make_home

SECRET = "zorbquux"


def hidden(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith("."))


def leave(path: Path, module: str, step: str, *args: Path) -> None:
    """What a process killed at ``step`` leaves, in the profile at ``path``: made in a copy
    of it apart (a backup or restore removes the leftovers it finds), then moved in."""
    apart = path.parent.parent / f"apart-{module}-{len(args)}" / path.name
    backups_dir(apart).mkdir(parents=True)
    shutil.copyfile(path, apart)
    killed_at(f"navi_desktop.memory.{module}", step, BACKUP_OR_RESTORE, apart, *args)
    for folder, into in ((apart.parent, path.parent), (backups_dir(apart), backups_dir(path))):
        for left in hidden(folder):
            into.mkdir(exist_ok=True)
            left.rename(into / left.name)


async def test_a_forget_removes_what_a_killed_backup_and_restore_left(tmp_path: Path) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    path = paths.profile_db("tester")
    memory_id = await add_a_secret(path, SECRET)
    outside = tmp_path / "ext.db"
    await asyncio.to_thread(make_backup, path, outside)
    leave(path, "backup", "_link_new")  # `navi memory backup` killed before its rename
    leave(path, "backup", "_link_new", outside)  # a restore killed mid-copy
    leave(path, "restore", "+copy_database", outside)  # ... and once the copy was made
    left = [*hidden(backups_dir(path)), *hidden(path.parent)]
    assert len(left) == 3 and all(holds(p, SECRET) for p in left), left
    assert hidden(path.parent)[0].name.startswith("..memory.db.restore-")

    daemon = await Daemon(paths).start()
    try:
        report = await daemon.call("memory.forget", {"args": [memory_id]})
    finally:
        await daemon.stop()
    assert report["forgotten"] == [memory_id]
    assert not any(p.exists() for p in left)
    assert hidden(backups_dir(path)) == [] and hidden(path.parent) == []


async def test_a_backup_being_written_is_left_to_its_writer(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    await add_a_secret(path, SECRET)
    # another process, copying
    writer = stopped("navi_desktop.memory.backup", "_link_new", BACKUP_OR_RESTORE, path, wait=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
        (tmp,) = hidden(backups_dir(path))
        assert await asyncio.to_thread(remove_leftovers, path) == []
        await asyncio.to_thread(make_backup, path)  # another backup meanwhile
        assert tmp.exists()
    finally:
        writer.kill()
        writer.wait(30)
    assert await asyncio.to_thread(remove_leftovers, path) == [tmp]  # its writer is gone
    assert not tmp.exists()


async def test_the_daemon_removes_what_a_killed_backup_left_when_it_opens_the_profile(
    tmp_path: Path,
) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    db = paths.profile_db("tester")
    async with await MemoryStore.open(db) as store:
        await store.add_memory(f"the code is {SECRET}")
    folder = backups_dir(db)
    folder.mkdir()
    left = folder / ".manual-20260101T000000Z.db.0badcafe.tmp"
    shutil.copy(db, left)  # as a backup killed mid-copy leaves it
    daemon = await Daemon(paths).start()  # its start opens every profile (recovery)
    try:
        await daemon.call("memory.list")
        assert not left.exists()
    finally:
        await daemon.stop()
