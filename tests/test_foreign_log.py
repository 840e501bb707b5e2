"""Another database's log beside a profile's file is refused, never replayed into it.

SQLite replays any log it finds beside a file: nothing in a log ties it to its file. A log
that a killed writer of another profile left, moved beside this file (or this profile's own
old log, under a file copied into place), showed the other database's memories as this
profile's, and the next checkpoint wrote them into the file for good. The logs here are
real ones, left by writers killed mid-work; the file's own log after such a crash is still
replayed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from navi_desktop.errors import ProfileUnreadable
from navi_desktop.memory.db import Database
from navi_desktop.memory.migrations import MIGRATIONS, migrate
from navi_desktop.memory.store import MemoryStore
from navi_desktop.memory.walcheck import scan
from navi_desktop.paths import Paths
from tests.daemon_home import navi
from tests.writer_support import killed, log, values

# Another tool's in-place change: its commits never rewrite page 1 (the file's header).
TOOL_WRITER = """
import os, sys, sqlean
conn = sqlean.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA wal_autocheckpoint = 0")
conn.execute("UPDATE memories SET value = ? WHERE id = 1", (sys.argv[2],))
os._exit(9)
"""


async def make(path: Path, *texts: str) -> None:
    async with await MemoryStore.open(path) as store:
        for text in texts:
            await store.add_memory(text)


def put_beside(source: Path, path: Path) -> None:
    """The log, and its index, that ``source``'s killed writer left, moved beside ``path``."""
    for suffix in ("-wal", "-shm"):
        shutil.copy(f"{source}{suffix}", f"{path}{suffix}")


def files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (path, log(path))}


async def refused(path: Path, words: str) -> None:
    """Both ways of opening refuse it with one line, and neither writes the file or its log."""
    before = files(path)
    for read_only in (False, True):
        with pytest.raises(ProfileUnreadable) as err:
            await MemoryStore.open(path, read_only=read_only)
        message = str(err.value)
        assert "\n" not in message and str(path) in message and words in message
        assert "memory.db-wal beside it belongs to another database" in message
        assert "both were left untouched: move memory.db-wal away" in message
    assert files(path) == before


async def test_another_profiles_log_is_refused_and_the_files_own_is_replayed(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a" / "memory.db", tmp_path / "b" / "memory.db"
    await make(a, "alpha likes tea")
    await make(b, "beta likes coffee")
    killed(a, "alpha saved just before a crash")
    assert await values(a) == ["alpha likes tea", "alpha saved just before a crash"]

    killed(b, "beta saved just before a crash")
    put_beside(b, a)
    await refused(a, "its saves are of a Navi memory file with another id")

    log(a).rename(tmp_path / "moved-away-wal")  # the fix the message gives
    assert await values(a) == ["alpha likes tea", "alpha saved just before a crash"]


async def test_a_log_of_in_place_writes_is_checked_by_the_size_it_leaves(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "memory.db", tmp_path / "b" / "memory.db"
    await make(a, "alpha likes tea")
    await make(b, *(f"beta note {i} " + "x" * 400 for i in range(30)))
    killed(a, "alpha likes green tea", writer=TOOL_WRITER)
    assert not scan(log(a)).page_one  # what makes it another tool's: no id in it
    assert await values(a) == ["alpha likes green tea"]

    killed(b, "beta was here", writer=TOOL_WRITER)
    put_beside(b, a)
    await refused(a, "its saves are of a database of")


async def test_a_file_upgraded_just_before_a_crash_keeps_its_log(tmp_path: Path) -> None:
    """The file's id is set by an upgrade step: killed before its first checkpoint, the file
    has none yet and its log has it. That log is the file's own."""
    a, b = tmp_path / "a" / "memory.db", tmp_path / "b" / "memory.db"
    db = await Database.open(a)
    await migrate(db, MIGRATIONS[:13])  # the steps before 0014_file_id
    await db.close()
    killed(a, "alpha saved on the upgrade")
    assert a.read_bytes()[60:64] == bytes(4)  # no id in the file yet
    assert await values(a) == ["alpha saved on the upgrade"]

    await make(b, "beta likes coffee")
    killed(b, "beta saved just before a crash")
    put_beside(b, a)
    await refused(a, "with another id")


def test_a_file_copied_into_place_over_the_profiles_old_log_is_refused(tmp_path: Path) -> None:
    """`cp` of another profile's file over one whose killed writer left its log."""
    environ = {**os.environ, "NAVI_HOME": str(tmp_path), "NAVI_DAEMON": "off"}
    paths = Paths.from_env(environ)
    a, b = paths.profile_db("alpha"), paths.profile_db("beta")
    for path, text in ((a, "alpha likes tea"), (b, "beta likes coffee")):
        done = navi(environ, "memory", "add", text, "--profile", path.parent.name)
        assert done.returncode == 0, done.stderr
    killed(a, "alpha saved just before a crash")
    shutil.copy(b, a)
    before = files(a)

    said = "memory.db-wal beside it belongs to another database"
    done = navi(environ, "memory", "list", "--profile", "alpha")
    assert done.returncode != 0 and "likes" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0]
    done = navi(environ, "memory", "doctor", "--profile", "alpha")  # in its report
    assert done.returncode != 0 and "likes" not in done.stdout and not done.stderr
    assert "PROBLEM  file" in done.stdout and said in done.stdout
    assert files(a) == before


async def test_a_transaction_that_changes_nothing_logs_nothing(tmp_path: Path) -> None:
    """Each commit stamps the file's id into the log by rewriting page 1: one that changed no
    row (the embedding pass's closing look, after every memory the daemon writes) logged a
    4 KB page for nothing. A commit that changes a row still carries the id."""
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        await store.add_memory("likes tea")
        await store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        wal = path.with_name("memory.db-wal")
        for _ in range(10):
            async with store.db.transaction():
                await store.db.execute("DELETE FROM embeddings WHERE model = 'none'")
        assert wal.stat().st_size == 0
        await store.add_memory("likes rain")
        logged = scan(wal)
        assert logged is not None and logged.page_one
