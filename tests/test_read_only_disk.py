"""The memory file on a file system that is read-only (mounted so, or remounted so by Linux
after a disk error). Before, the advice was to `chmod` the file, which cannot help, and the
profile stayed in that error state until the daemon restarted: now one line says the file
system is read-only, and the profile opens by itself once it is writable again. Its
memories can still be read, searched and exported, by the daemon and by the CLI: a read
opens the file without writing anything to it or beside it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from navi_desktop.daemon.client import RpcCallError
from navi_desktop.errors import NotFound, ProfileError, ProfileUnreadable
from navi_desktop.memory.db import Database
from navi_desktop.memory.migrations import MIGRATIONS, migrate
from navi_desktop.memory.store import MemoryStore
from navi_desktop.paths import Paths
from tests.daemon_home import navi, offline_environ, one_line, remount
from tests.test_disk_full import small_disk
from tests.tui_support import DEAD_HOST, Daemon, make_home


async def test_a_read_only_file_system_is_named_and_the_profile_opens_once_writable(
    tmp_path: Path,
) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    with small_disk(paths.data, "32m") as data:  # the data folder is the small disk
        async with await MemoryStore.open(paths.profile_db("tester")) as store:
            await store.add_memory("likes tea")
        remount(data, "ro")
        daemon = await Daemon(paths).start()
        try:
            # Browsing and search go on: Linux makes a disk read-only after an error, which
            # is when a user most wants to see, and export, what is in it.
            listed = await daemon.call("memory.list")
            assert [m["value"] for m in listed["memories"]] == ["likes tea"]
            found = await daemon.call("memory.search", {"args": ["tea"]})
            assert [h["memory"]["value"] for h in found] == ["likes tea"]
            for _ in range(2):  # and again: not an error state that waits for a restart
                with pytest.raises(RpcCallError) as err:
                    await daemon.call("memory.add", {"args": ["likes rain"]})
                message = str(err.value)
                assert err.value.kind == "DiskError", message
                assert "file system is read-only" in message and "\n" not in message
                assert "chmod" not in message and "damaged" not in message
            remount(data, "rw")  # the profile opened to read is opened again to write
            await daemon.call("memory.add", {"args": ["likes rain"]})
            listed = await daemon.call("memory.list")
            assert sorted(m["value"] for m in listed["memories"]) == ["likes rain", "likes tea"]
        finally:
            remount(data, "rw")
            await daemon.stop()


async def test_a_whole_navi_home_on_a_read_only_disk_can_still_be_read(tmp_path: Path) -> None:
    """Reads open the file without writing anything to it or beside it; every write, the
    daemon's start included, names the read-only file system and the fix."""
    with small_disk(tmp_path / "disk", "32m") as disk:
        paths = make_home(disk, DEAD_HOST)
        async with await MemoryStore.open(paths.profile_db("tester")) as store:
            await store.add_memory("likes tea")
            await store.add_memory("lives in Porto")
        before = {p: p.read_bytes() for p in (disk / "home").rglob("*") if p.is_file()}
        remount(disk, "ro")
        try:
            env = offline_environ(disk / "home", NAVI_DAEMON="on", NAVI_EMBEDDER="auto")
            listed = navi(env, "memory", "list")
            assert listed.returncode == 0, listed.stderr
            assert "likes tea" in listed.stdout and "lives in Porto" in listed.stdout
            # The one line before says why the daemon is not used, and the fix.
            assert listed.stderr.count("\n") == 1 and "read-only file system" in listed.stderr
            assert "mount it read-write again" in listed.stderr
            found = navi(env, "memory", "search", "Porto")
            assert found.returncode == 0 and "lives in Porto" in found.stdout, found.stderr
            exported = navi(env, "memory", "export")
            assert exported.returncode == 0, exported.stderr
            assert {m["value"] for m in json.loads(exported.stdout)["memories"]} == {
                "likes tea",
                "lives in Porto",
            }
            doctor = navi(env, "memory", "doctor")
            assert doctor.returncode == 0 and "file system is read-only" in doctor.stdout
            for args, tried in (
                (("memory", "add", "x"), True),
                (("memory", "backup"), False),
                (("daemon", "start"), False),
            ):
                line = one_line(navi(env, *args), after_daemon_line=tried)
                assert "read-only" in line and "mount it read-write again" in line, line
        finally:
            remount(disk, "rw")
        after = {p: p.read_bytes() for p in (disk / "home").rglob("*") if p.is_file()}
        assert after == before  # nothing written, nothing made


async def test_a_log_left_without_its_index_on_a_read_only_disk_is_named(tmp_path: Path) -> None:
    """A crash leaves the log (``-wal``) and its index (``-shm``) beside the file: read-only,
    the saves in the log are read through the index. Without the index (which SQLite cannot
    make on a read-only disk) the saves are not silently skipped: one line says so."""
    with small_disk(tmp_path / "disk", "32m") as disk:
        paths = make_home(disk, DEAD_HOST)
        db = paths.profile_db("tester")
        other = paths.profile_db("other")
        other.parent.mkdir(parents=True)
        async with await MemoryStore.open(db) as store:
            await store.add_memory("likes tea")
            for suffix in ("", "-wal", "-shm"):  # as a crash leaves them
                shutil.copy(f"{db}{suffix}", f"{other}{suffix}")
        remount(disk, "ro")
        try:
            env = offline_environ(disk / "home", NAVI_EMBEDDER="auto")
            listed = navi(env, "memory", "list", "--profile", "other")
            assert listed.returncode == 0 and "likes tea" in listed.stdout, listed.stderr
            remount(disk, "rw")
            Path(f"{other}-shm").unlink()
            remount(disk, "ro")
            line = one_line(navi(env, "memory", "list", "--profile", "other"))
            assert "memory.db-wal holds saves" in line and "memory.db-shm" in line, line
            assert "mount it read-write again" in line
        finally:
            remount(disk, "rw")
        listed = navi(env, "memory", "list", "--profile", "other")  # writable: the log is read
        assert listed.returncode == 0 and "likes tea" in listed.stdout, listed.stderr


async def test_a_store_opened_to_read_writes_nothing_and_refuses_an_older_schema(
    tmp_path: Path,
) -> None:
    """Without root: the read-only open itself, on an ordinary folder."""
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        await store.add_memory("likes tea")
    before = sorted(tmp_path.iterdir()), path.read_bytes()
    async with await MemoryStore.open(path, read_only=True) as store:
        assert [m.value for m in (await store.list_memories())[0]] == ["likes tea"]
        with pytest.raises(ProfileUnreadable, match="readonly database"):
            await store.add_memory("likes rain")
    assert (sorted(tmp_path.iterdir()), path.read_bytes()) == before

    old = tmp_path / "old.db"
    db = await Database.open(old)
    await migrate(db, MIGRATIONS[:1])
    await db.close()
    before = old.read_bytes()
    with pytest.raises(ProfileError, match=r"older version of Navi.*left untouched"):
        await MemoryStore.open(old, read_only=True)
    assert old.read_bytes() == before
    with pytest.raises(NotFound):
        await MemoryStore.open(tmp_path / "none.db", read_only=True)


# -- an empty memory file on a read-only disk -------------------------------------------------
# An empty file is a new profile, set up when Navi first opens it to write: on a read-only disk
# that cannot happen. Before, every command said "no memory file at PATH" of the file that was
# there (exit 2, as for a mistyped profile), and the doctor said that Navi would set it up.


def _empty_profile(paths: Paths) -> Path:
    db = paths.profile_db("tester")
    db.parent.mkdir(parents=True, mode=0o700)
    db.touch(mode=0o600)
    return db


def _empty_and_read_only(line: str, db: Path) -> None:
    assert line.startswith(f"navi: cannot use {db}: it is empty (0 bytes"), line
    assert "its file system is read-only" in line and "mount it read-write again" in line
    assert "no memory file" not in line


async def test_an_empty_memory_file_on_a_read_only_disk_is_said_to_be_there_and_empty(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", "32m") as disk:
        paths = make_home(disk, DEAD_HOST)
        db = _empty_profile(paths)
        remount(disk, "ro")
        try:
            env = offline_environ(disk / "home")
            for args in (("memory", "list"), ("memory", "export"), ("memory", "stats")):
                done = navi(env, *args)
                assert done.stderr.count("\n") == 1 and done.stdout == "", done.stderr
                _empty_and_read_only(one_line(done), db)
            # With the daemon on, the line before says why it is not used (it cannot start).
            tried = navi({**env, "NAVI_DAEMON": "on"}, "memory", "list")
            _empty_and_read_only(one_line(tried, after_daemon_line=True), db)

            doctor = navi(env, "memory", "doctor")
            assert doctor.returncode == 1 and doctor.stderr == "", doctor.stderr
            assert (
                "PROBLEM  schema           an empty file (a new profile), which Navi cannot set"
                " up on a read-only file system" in doctor.stdout
            ), doctor.stdout
            assert "What to do:\n  - mount it read-write again" in doctor.stdout
            assert "sets it up when it first opens it" not in doctor.stdout

            backup = navi(env, "memory", "backup")
            assert backup.stderr.count("\n") == 1, backup.stderr
            line = one_line(backup)
            assert "file system is read-only" in line and "mount it read-write again" in line
            assert "no memory file" not in line
        finally:
            remount(disk, "rw")
        assert db.stat().st_size == 0  # nothing was written
        listed = navi(env, "memory", "list")  # writable again: set up, as the line said
        assert listed.returncode == 0, listed.stderr
        assert db.stat().st_size > 0


async def test_the_daemon_says_an_empty_file_on_a_read_only_disk_is_empty(tmp_path: Path) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    with small_disk(paths.data, "32m") as data:  # the daemon's own folders stay writable
        db = _empty_profile(paths)
        remount(data, "ro")
        daemon = await Daemon(paths).start()
        try:
            with pytest.raises(RpcCallError) as err:
                await daemon.call("memory.list")
            assert err.value.kind == "DiskError", str(err.value)
            _empty_and_read_only(f"navi: {err.value}", db)
            remount(data, "rw")  # and the next call sets it up
            assert (await daemon.call("memory.list"))["memories"] == []
        finally:
            remount(data, "rw")
            await daemon.stop()


async def test_an_empty_file_opened_to_read_is_said_to_be_empty(tmp_path: Path) -> None:
    """Without root: on a writable disk a file is opened only to read when the user may not
    write it (mode 0400)."""
    path = tmp_path / "memory.db"
    path.touch(mode=0o400)
    with pytest.raises(ProfileUnreadable, match=r"it is empty \(0 bytes") as err:
        await MemoryStore.open(path, read_only=True)
    assert "no memory file" not in str(err.value) and "chmod u+rw" in str(err.value)
