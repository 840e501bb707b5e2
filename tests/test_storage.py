"""The file on disk: location, permissions, pragmas, safety checks, migrations, atomic batches."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest

from navi_desktop.errors import CorruptDatabase, InvalidInput
from navi_desktop.memory import MemoryStore, NewMemory
from navi_desktop.memory.db import Database
from navi_desktop.memory.migrations import MIGRATIONS, migrate
from navi_desktop.paths import Paths


def test_paths_under_navi_home(tmp_path):
    paths = Paths.from_env({"NAVI_HOME": str(tmp_path)})
    assert paths.profile_db("alice") == tmp_path / "data" / "profiles" / "alice" / "memory.db"
    for folder in (paths.config, paths.data, paths.state, paths.runtime, paths.cache):
        assert folder.is_relative_to(tmp_path)
    with pytest.raises(InvalidInput):
        paths.profile_db("../escape")


async def test_file_is_private_and_configured(tmp_path):
    path = Paths.from_env({"NAVI_HOME": str(tmp_path)}).profile_db("me")
    async with await MemoryStore.open(path) as store:
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert (await store.db.scalar("PRAGMA journal_mode")) == "wal"
        assert (await store.db.scalar("PRAGMA foreign_keys")) == 1
        assert (await store.db.scalar("PRAGMA busy_timeout")) == 5000
        assert (await store.db.scalar("PRAGMA secure_delete")) == 1
        names = {r[0] for r in await store.db.fetchall("SELECT name FROM schema_migrations")}
        assert names == {name for name, _ in MIGRATIONS}


@pytest.mark.parametrize(
    "content", [b"not a database at all, just text\n" * 10, b"SQLite format 3\x00" + b"\xff" * 200]
)
async def test_corrupt_file_is_reported_and_untouched(tmp_path, content):
    path = tmp_path / "p" / "memory.db"
    path.parent.mkdir()
    path.write_bytes(content)
    with pytest.raises(CorruptDatabase) as err:
        await MemoryStore.open(path)
    assert str(path) in str(err.value)
    assert path.read_bytes() == content
    assert not path.with_name("memory.db-wal").exists()


async def test_foreign_sqlite_file_is_refused(tmp_path):
    import sqlean

    path = tmp_path / "memory.db"
    conn = sqlean.connect(path)
    conn.execute("CREATE TABLE notes (x)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(CorruptDatabase, match="not a Navi memory file"):
        await MemoryStore.open(path)
    assert path.read_bytes() == before


async def test_upgrade_from_first_schema(tmp_path):
    path = tmp_path / "memory.db"
    db = await Database.open(path)
    assert await migrate(db, MIGRATIONS[:1]) == ["0001_core"]
    async with db.transaction():
        await db.execute(
            "INSERT INTO sessions (id, created_at, last_active_at) VALUES"
            " ('s1', '2024-01-01T00:00:00Z', '2024-01-01T00:00:00Z')"
        )
        await db.execute(
            "INSERT INTO messages (session_id, role, content, created_at) VALUES"
            " ('s1', 'user', 'my cat Miso likes tuna', '2024-01-01T00:00:00Z')"
        )
        await db.execute(
            "INSERT INTO memories (kind, category, key, norm_key, value, source, created_at,"
            " updated_at, valid_from) VALUES ('fact', 'preferences', 'drink', 'user:drink',"
            " 'oolong tea', 'conversation', '2024-01-01T00:00:00Z', '2024-01-01T00:00:00Z',"
            " '2024-01-01T00:00:00Z')"
        )
    await db.close()

    async with await MemoryStore.open(path) as store:
        applied = {r[0] for r in await store.db.fetchall("SELECT name FROM schema_migrations")}
        assert applied == {name for name, _ in MIGRATIONS}
        hits = await store.search("oolong")
        assert [h.memory.value for h in hits] == ["oolong tea"]
        hits = await store.search("tuna", kinds=["message"])
        assert len(hits) == 1 and "Miso" in hits[0].text
        # the upgraded file takes new writes like a new one
        assert (await store.add_memory("green tea", key="drink")).action == "superseded"
    async with await MemoryStore.open(path) as store:  # reopening applies nothing twice
        assert await migrate(store.db) == []


async def test_batch_is_all_or_nothing(tmp_path):
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        good = NewMemory(value="likes hiking", category="preferences", key="hobby")
        bad = NewMemory(value="x", category="preferences", key="k", confidence=7)
        with pytest.raises(InvalidInput):
            await store.add_memories([good, bad])
        assert (await store.list_memories())[1] == 0

        class Boom(Exception):
            pass

        with pytest.raises(Boom):
            async with store.db.transaction():
                await store._upsert(good, "user")
                raise Boom
        assert (await store.list_memories())[1] == 0


def test_crash_mid_batch_leaves_nothing(tmp_path):
    """A process killed inside a write transaction: after restart, no trace of the batch."""
    path = tmp_path / "memory.db"
    script = textwrap.dedent(f"""
        import asyncio, os
        from navi_desktop.memory import MemoryStore, NewMemory
        async def main():
            store = await MemoryStore.open({str(path)!r})
            await store.add_memory("committed before the crash", key="before")
            async with store.db.transaction():
                await store._upsert(NewMemory(value="half written one", key="a"), "user")
                await store._upsert(NewMemory(value="half written two", key="b"), "user")
                os._exit(9)
        asyncio.run(main())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == 9, proc.stderr.decode()

    async def check():
        async with await MemoryStore.open(path) as store:
            memories, _total = await store.list_memories(status=None)
            assert [m.value for m in memories] == ["committed before the crash"]
            assert not await store.search("half written")
            assert await store.db.scalar("SELECT count(*) FROM memory_history") == 1

    import asyncio

    asyncio.run(check())
    assert os.stat(path).st_size > 0


async def test_open_without_create_and_foreign_file_mode(tmp_path):
    from navi_desktop.errors import NotFound

    missing = tmp_path / "nobody" / "memory.db"
    with pytest.raises(NotFound, match=str(missing)):
        await MemoryStore.open(missing, create=False)
    assert not missing.parent.exists()

    import sqlean

    foreign = tmp_path / "other.db"
    conn = sqlean.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    foreign.chmod(0o644)
    with pytest.raises(CorruptDatabase):
        await MemoryStore.open(foreign)
    assert stat.S_IMODE(foreign.stat().st_mode) == 0o644


async def test_bulk_writes_are_checkpointed_into_the_file_off_the_write_path(tmp_path, monkeypatch):
    """A few large transactions trigger the background checkpoint as many small ones do,
    so an import does not leave the database's pages in an ever-growing log."""
    import asyncio

    monkeypatch.setattr(Database, "CHECKPOINT_CHANGES", 100)
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        await store.add_memories(
            [NewMemory(f"bulkvalue{i} fact", key=f"bulk {i}") for i in range(200)]
        )
        for _ in range(100):  # the checkpoint runs in a thread: wait for it, briefly
            if b"bulkvalue199" in path.read_bytes():
                break
            await asyncio.sleep(0.05)
        assert b"bulkvalue199" in path.read_bytes()  # in the file itself, not only the log


async def test_opening_gives_the_planner_statistics_it_lacks(tmp_path):
    import sqlean

    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        await store.add_memories([NewMemory(f"fact {i}", key=f"key {i}") for i in range(300)])
    raw = sqlean.connect(str(path), isolation_level=None)
    raw.execute("DELETE FROM sqlite_stat1")  # as a file written in bulk, never analysed
    raw.close()
    async with await MemoryStore.open(path) as store:
        tables = {r[0] for r in await store.db.fetchall("SELECT tbl FROM sqlite_stat1")}
    assert {"memories", "memory_history"} <= tables
