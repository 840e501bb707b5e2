"""A memory's id names it for good: forgetting it, and restarting, never hands the id to
another memory (`navi memory forget 11 --yes` typed again from shell history must not delete
something else). An existing profile migrates without renumbering."""

from __future__ import annotations

from navi_desktop.memory import MemoryStore
from navi_desktop.memory.db import Database
from navi_desktop.memory.migrations import MIGRATIONS, migrate

NOW = "2024-01-01T00:00:00+00:00"


async def add(store: MemoryStore, value: str) -> int:
    return (await store.add_memory(value, category="preferences", key=value)).memory.id


async def test_a_forgotten_id_is_not_given_again(tmp_path):
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        ids = [await add(store, f"likes {w}") for w in ("tea", "jazz", "rain")]
        assert ids == [1, 2, 3]
        await store.forget(2)
        await store.forget(3)
        assert await add(store, "likes cats") == 4
        await store.forget(4)
    async with await MemoryStore.open(path) as store:  # and not after a restart either
        assert await add(store, "likes dogs") == 5


async def test_an_old_profile_keeps_its_ids_and_links(tmp_path):
    path = tmp_path / "memory.db"
    db = await Database.open(path)
    await migrate(db, MIGRATIONS[:7])
    async with db.transaction():
        for value in ("oolong tea", "green tea", "jazz"):
            await db.execute(
                "INSERT INTO memories (kind, category, key, norm_key, value, source, created_at,"
                " updated_at, valid_from) VALUES ('fact', 'preferences', ?, ?, ?, 'conversation',"
                " ?, ?, ?)",
                (value, f"user:{value}", value, NOW, NOW, NOW),
            )
        await db.execute("DELETE FROM memories WHERE id = 2")  # a gap, kept as it is
        await db.execute(
            "UPDATE memories SET superseded_by = 3, status = 'superseded' WHERE id = 1"
        )
        await db.execute(
            "INSERT INTO memory_history (memory_id, action, actor, at)"
            " VALUES (1, 'add', 'user', ?)",
            (NOW,),
        )
    await db.close()

    async with await MemoryStore.open(path) as store:
        rows = await store.db.fetchall("SELECT id, value, superseded_by FROM memories ORDER BY id")
        assert [tuple(r) for r in rows] == [(1, "oolong tea", 3), (3, "jazz", None)]
        assert await store.db.scalar("SELECT count(*) FROM memory_history WHERE memory_id = 1") == 1
        assert await store.db.scalar("PRAGMA foreign_keys") == 1
        await store.forget(3)
        assert await add(store, "likes rain") == 4
    async with await MemoryStore.open(path) as store:
        assert await migrate(store.db) == []
