"""A backup is a file of its own: it gets its own id, so the profile's log left by a crash
is never replayed into a backup put back by hand (nor into a restored copy), which turned a
whole backup into a "damaged" file. Real files, a real crash's log."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from navi_desktop.errors import ProfileUnreadable
from navi_desktop.memory.backup import make_backup
from navi_desktop.memory.store import MemoryStore


def file_id(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


async def test_a_backup_put_back_by_hand_beside_a_crashs_log_is_refused_by_name(tmp_path):
    path = tmp_path / "p" / "memory.db"
    async with await MemoryStore.open(path) as store:
        for i in range(20):
            await store.add_memory(f"old fact number {i}")
    backup = make_backup(path, tmp_path / "backup.db").path
    assert file_id(backup) not in (0, file_id(path))
    crashed_log = tmp_path / "crash.wal"
    store = await MemoryStore.open(path)
    try:
        for i in range(200):
            await store.add_memory(f"newer fact number {i} " + "x" * 200)
        shutil.copy(path.with_name("memory.db-wal"), crashed_log)  # as a crash leaves it
    finally:
        await store.close()
    shutil.copy(backup, path)  # the user puts the backup back by hand
    path.with_name("memory.db-shm").unlink(missing_ok=True)
    shutil.copy(crashed_log, path.with_name("memory.db-wal"))
    before = path.read_bytes()

    with pytest.raises(ProfileUnreadable, match="belongs to another database") as refused:
        await MemoryStore.open(path)
    assert "move memory.db-wal away" in str(refused.value)
    assert path.read_bytes() == before
    path.with_name("memory.db-wal").unlink()
    async with await MemoryStore.open(path) as store:  # the backup, whole
        assert await store.db.scalar("SELECT count(*) FROM memories") == 20
