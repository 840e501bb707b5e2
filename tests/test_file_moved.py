"""The memory file changed by another program while a real daemon has it open: moved away,
deleted, replaced by another file, or cut short.

Before, a save after a move was answered "Added" and went to the moved file's log, a search
opened an empty file, readable by others, at the path and failed with "internal error", and
a file cut short killed the daemon (SIGBUS through the read connections' memory map).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlean

from navi_desktop.daemon.client import RemoteCorruptDatabase
from navi_desktop.errors import ProfileMoved
from navi_desktop.memory.db import Database
from navi_desktop.memory.store import MemoryStore
from tests.tui_support import DEAD_HOST, Daemon, make_home


def mem(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"profile": "me", "args": list(args), "kwargs": kwargs}


async def values(daemon: Daemon) -> set[str]:
    listed = await daemon.call("memory.list", mem(limit=100))
    return {m["value"] for m in listed["memories"]}


async def make_profile(path: Path, *notes: str) -> None:
    async with await MemoryStore.open(path) as store:
        for note in notes:
            await store.add_memory(note)


@contextlib.asynccontextmanager
async def running(tmp_path: Path, *notes: str) -> AsyncIterator[tuple[Path, Daemon]]:
    """A profile "me" holding ``notes``, and a daemon that has it open."""
    paths = make_home(tmp_path, DEAD_HOST)
    db = paths.profile_db("me")
    await make_profile(db, *notes)
    daemon = await Daemon(paths).start()
    try:
        await values(daemon)  # opened
        yield db, daemon
    finally:
        await daemon.stop()


def assert_moved_error(err: pytest.ExceptionInfo[RemoteCorruptDatabase], db: Path) -> None:
    assert err.value.kind == "ProfileMoved"
    message = str(err.value)
    assert "\n" not in message and str(db) in message
    assert "moved or deleted by another program" in message
    assert "put the file back" in message and "navi daemon stop" in message


async def test_a_file_moved_away_is_refused_and_opened_again_once_put_back(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, "I keep bees") as (db, daemon):
        await daemon.call("memory.add", mem("I grow figs"))  # in the log, not yet the file
        away = tmp_path / "elsewhere.db"
        db.rename(away)
        calls = [
            ("memory.add", mem("I like plums")),
            ("memory.search", mem("bees")),
            ("memory.list", mem()),
        ]
        for method, params in calls * 2:  # and again: the error state answers
            with pytest.raises(RemoteCorruptDatabase) as err:
                await daemon.call(method, params)
            assert_moved_error(err, db)
        assert not db.exists()  # no empty file made at the path
        status = await daemon.call("daemon.status")
        assert status["profile_errors"]["me"]["kind"] == "ProfileMoved"

        away.rename(db)  # the user puts it back
        assert await values(daemon) == {"I keep bees", "I grow figs"}  # the log went with it
        await daemon.call("memory.add", mem("I like plums"))
        assert "I like plums" in await values(daemon)
    assert db.stat().st_mode & 0o777 == 0o600


async def test_a_deleted_file_is_named_and_a_restart_starts_an_empty_memory(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, "I keep bees") as (db, daemon):
        db.unlink()
        with pytest.raises(RemoteCorruptDatabase) as err:
            await daemon.call("memory.add", mem("I like plums"))
        assert_moved_error(err, db)
        assert not db.exists()
    daemon = await Daemon(make_home(tmp_path, DEAD_HOST)).start()
    try:
        assert await values(daemon) == set()
    finally:
        await daemon.stop()


async def test_a_file_replaced_by_another_is_used_and_the_old_log_never_reaches_it(
    tmp_path: Path,
) -> None:
    other = tmp_path / "from-a-backup.db"
    await make_profile(other, "I keep goats")
    async with running(tmp_path, "I keep bees") as (db, daemon):
        await daemon.call("memory.add", mem("I grow figs"))  # frames in the old file's log
        os.replace(other, db)  # as a sync tool or a hand-made restore would
        assert await values(daemon) == {"I keep goats"}
        await daemon.call("memory.add", mem("I like plums"))
    async with await MemoryStore.open(db) as store:
        memories, _ = await store.list_memories()
        assert {m.value for m in memories} == {"I keep goats", "I like plums"}
        assert await store.db.scalar("PRAGMA integrity_check") == "ok"
    assert sorted(p.name for p in db.parent.iterdir() if p.name.startswith("memory.db")) == [
        "memory.db"
    ]


TRUNCATED = """
import asyncio, os, sys
from navi_desktop.errors import NaviError
from navi_desktop.memory.store import MemoryStore

async def main(path):
    store = await MemoryStore.open(path)
    for i in range(80):
        await store.add_memory(f"note {i} about the garden " + "x" * 900)
    await store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the pages in the file
    await store.search("garden")  # the read connections map the file
    os.truncate(path, os.path.getsize(path) // 4)  # another program cuts it short
    for query in ("garden", "note 7"):
        try:
            await store.search(query)
        except NaviError as exc:
            print(type(exc).__name__, exc, flush=True)
    try:
        await store.close()
    except NaviError:
        pass
    os._exit(0)  # a worker thread of the damaged file's connection may linger

asyncio.run(main(sys.argv[1]))
"""


def test_a_file_cut_short_is_reported_as_damaged_not_a_crash(tmp_path: Path) -> None:
    # In a child process: before, reading the map past the new end killed the process.
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TRUNCATED), str(tmp_path / "memory.db")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("ProfileDamaged ") for line in lines), lines
    assert "navi memory doctor" in lines[0]


def test_helper_connections_never_create_the_file(tmp_path: Path) -> None:
    from navi_desktop.memory.connections import connect

    missing = tmp_path / "memory.db"
    with pytest.raises(Exception, match="unable to open"):
        connect(missing)
    assert not missing.exists()


async def test_a_log_the_old_file_left_behind_is_not_read_into_the_replacement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    other = tmp_path / "from-a-backup.db"
    await make_profile(other, "I keep goats")
    async with running(tmp_path, "I keep bees") as (db, daemon):
        await daemon.call("memory.add", mem("my locker code is 4711"))  # in the old log
        closes = Database.close

        async def close_failing(self: Database) -> None:  # as on an I/O error: log kept
            if self.path == db and self.moved_away():
                await self.settle()  # the daily backup the write above started, the readers
                await self.conn.close()  # a connection that is not the last checkpoints not
                return
            await closes(self)

        keep = sqlean.connect(str(db))  # another reader: SQLite's close leaves the log
        monkeypatch.setattr(Database, "close", close_failing)
        os.replace(other, db)
        assert await values(daemon) == {"I keep goats"}
        keep.close()
    async with await MemoryStore.open(db) as store:
        assert await store.db.scalar("PRAGMA integrity_check") == "ok"
    leftovers = [p.name for p in db.parent.iterdir() if p.name.startswith("memory.db")]
    assert sorted(leftovers) == ["memory.db"]
    assert b"4711" not in db.read_bytes()
    assert "memory.db-wal" in caplog.text and "of the file that was moved" in caplog.text


async def test_a_replacement_that_came_with_its_own_log_keeps_it(tmp_path: Path) -> None:
    other = tmp_path / "other" / "memory.db"
    await make_profile(other, "I keep goats")
    async with running(tmp_path, "I keep bees") as (db, daemon):
        async with await MemoryStore.open(other) as store:  # a last write, still in its log
            await store.add_memory("I keep ducks")
            for suffix in ("", "-wal"):  # both moved in, as a sync tool would
                shutil.copyfile(f"{other}{suffix}", f"{other}{suffix}.copy")
        for suffix in ("-wal", ""):
            os.replace(f"{other}{suffix}.copy", f"{db}{suffix}")
        assert await values(daemon) == {"I keep goats", "I keep ducks"}


async def test_a_helper_that_opens_the_path_as_it_is_replaced_reads_nothing_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The checkpoint, the daily backup and the read connections open the file by name, in a
    # thread, after checking that it is still theirs. A replacement landing between the check
    # and the open gave them the new file, with the old one's log still beside it: the
    # checkpoint copied the old file's pages into the new one.
    from navi_desktop.memory.backup import backups_dir, take_daily
    from navi_desktop.memory.connections import ReadPool

    db = tmp_path / "me" / "memory.db"
    other = tmp_path / "from-a-backup.db"
    await make_profile(other, "I keep goats")
    replacement = other.read_bytes()
    store = await MemoryStore.open(db)
    try:
        await store.add_memory("my locker code is 4711")  # in this file's log, not yet in it
        assert Path(f"{db}-wal").stat().st_size > 0
        os.replace(other, db)
        monkeypatch.setattr(Database, "moved_away", lambda self: False)  # the check came first

        store.db._checkpoint_now()
        with pytest.raises(ProfileMoved):
            take_daily(db, 3, expect=store.db.file_identity)
        readers = ReadPool(db, store.db.file_identity)
        try:
            with pytest.raises(ProfileMoved):
                await readers.run(lambda conn: conn.execute("SELECT 1").fetchone())
        finally:
            readers.close()
        assert db.read_bytes() == replacement
        assert not backups_dir(db).exists() or not list(backups_dir(db).iterdir())
    finally:
        monkeypatch.undo()
        await store.close()
