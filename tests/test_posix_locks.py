"""Looking at a profile's file never costs this process its SQLite locks on it. Closing any
descriptor of a file drops every POSIX lock the process holds on that file, SQLite's too:
a plain open() and close() of a profile the process has open through SQLite (a header
check, a backup or a restore naming it) left its readers unseen by other processes, so a
checkpoint could overwrite pages they were reading (the forget's scrub said "done" while a
reader still held old pages). Checked with the kernel's own list of locks (/proc/locks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from navi_desktop.memory.backup import backup_problem, make_backup
from navi_desktop.memory.filecheck import check_file, read_only
from navi_desktop.memory.restore import check_backup
from navi_desktop.memory.store import MemoryStore

pytestmark = pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs /proc/locks")


def held(path: Path) -> list[str]:
    """This process's POSIX locks on ``path``: "READ start end" each."""
    inode, pid = str(os.stat(path).st_ino), str(os.getpid())
    out = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        at = 2 if fields[1] == "->" else 1
        ours = fields[at] == "POSIX" and fields[at + 3] == pid
        if ours and fields[at + 4].rsplit(":", 1)[-1] == inode:
            out.append(" ".join([fields[at + 2], *fields[at + 5 : at + 7]]))
    return out


async def test_a_look_at_a_file_open_here_keeps_its_locks(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        await store.add_memory("likes tea")
        locks = held(path)
        assert locks  # SQLite's shared lock while it has the file open in WAL mode
        looks = {
            "check_file": lambda: check_file(path),
            "backup_problem": lambda: backup_problem(path),
            "check_backup": lambda: check_backup(path),  # a restore naming an open profile
            "read_only": lambda: read_only(path).close(),
            "make_backup": lambda: make_backup(path, tmp_path / "copy.db"),
        }
        for name, look in looks.items():
            look()
            assert held(path) == locks, name
