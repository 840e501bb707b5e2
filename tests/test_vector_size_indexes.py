"""The vectors' owner indexes hold each vector's size (step 0015): whether a memory or a
message has a vector of the current model at its current size (the daemon's check after each
memory write, the embedding pass's selection) is answered from an index alone, not by reading
each vector's row. A profile made before the step opens with its vectors as they were."""

from __future__ import annotations

from typing import Any

import sqlean

from navi_desktop.memory.db import Database
from navi_desktop.memory.migrations import MIGRATIONS, migrate
from navi_desktop.memory.store import MemoryStore
from tests.fakes import BagOfWordsEmbedder

STEP = "0015_vector_size_in_indexes"
VALUES = ("drinks green tea", "lives in Porto", "rides a red bicycle", "keeps bees")
OWNER_INDEXES = {"embeddings_by_memory": "memory_id", "embeddings_by_message": "message_id"}


async def old_profile(path, embedder) -> None:
    """A profile of the schema before the step, its memories and a message embedded."""
    names = [name for name, _ in MIGRATIONS]
    db = await Database.open(path)
    await migrate(db, MIGRATIONS[: names.index(STEP)])
    store = MemoryStore(db, embedder)
    for value in VALUES:
        await store.add_memory(value)
    session = await store.create_session("old")
    await store.save_message(session.id, "user", "my sister moved to Toronto last year")
    await store.backfill_embeddings()
    await db.close()


def indexes(path) -> dict[str, tuple[bool, list[str], str]]:
    """The embeddings table's indexes: name -> (unique, columns, SQL)."""
    with sqlean.connect(str(path)) as conn:
        out = {}
        for _, name, unique, *_ in conn.execute("PRAGMA index_list(embeddings)"):
            if name.startswith("sqlite_"):
                continue
            columns = [r[2] for r in conn.execute(f"PRAGMA index_info({name})")]
            sql = conn.execute("SELECT sql FROM sqlite_schema WHERE name = ?", (name,)).fetchone()
            out[name] = (bool(unique), columns, sql[0])
    conn.close()
    return out


def vectors(path) -> list[tuple[Any, ...]]:
    with sqlean.connect(str(path)) as conn:
        rows = [tuple(r) for r in conn.execute("SELECT * FROM embeddings ORDER BY id")]
    conn.close()
    return rows


async def test_an_older_profile_gets_the_indexes_and_keeps_its_vectors(tmp_path):
    path = tmp_path / "memory.db"
    embedder = BagOfWordsEmbedder("test/bow-64", 64)
    await old_profile(path, embedder)
    before = indexes(path)
    assert before["embeddings_by_memory"][:2] == (True, ["memory_id", "model"])
    assert before["embeddings_by_message"][:2] == (True, ["message_id", "model"])
    assert before["embeddings_by_model"][:2] == (False, ["model"])
    kept = vectors(path)
    assert len(kept) == len(VALUES) + 1

    async with await MemoryStore.open(path, embedder=embedder) as store:
        assert await store.db.scalar(
            "SELECT count(*) FROM schema_migrations WHERE name = ?", (STEP,)
        )
        calls = embedder.calls
        assert await store.missing_embeddings() == 0
        assert await store.backfill_embeddings() == 0  # nothing made again
        assert embedder.calls == calls
        hits = await store.search("user: rides a red bicycle")
        first = next(h for h in hits if h.memory is not None)
        assert first.memory.value == "rides a red bicycle" and first.signals["vector"].rank == 1
    assert vectors(path) == kept
    after = indexes(path)
    assert after["embeddings_by_memory"][:2] == (True, ["memory_id", "model", "dim"])
    assert after["embeddings_by_message"][:2] == (True, ["message_id", "model", "dim"])
    assert after["embeddings_by_model"][:2] == (False, ["model", "dim"])
    for name in OWNER_INDEXES:  # still of the rows that have such an owner only
        assert after[name][2].endswith(f"WHERE {OWNER_INDEXES[name]} IS NOT NULL")

    fresh = tmp_path / "new.db"
    async with await MemoryStore.open(fresh):
        pass
    assert indexes(fresh) == after  # a new profile's are the same


async def test_the_missing_vectors_check_and_the_pass_read_only_the_indexes(tmp_path, monkeypatch):
    """Each query that looks for a text without a vector of the current model and size, as
    the store runs it, is planned as a search of an owner index that covers it."""
    embedder = BagOfWordsEmbedder("test/bow-64", 64)
    async with await MemoryStore.open(tmp_path / "memory.db", embedder=embedder) as store:
        for value in VALUES:
            await store.add_memory(value)
        session = await store.create_session("s")
        await store.save_message(session.id, "user", "my sister moved to Toronto last year")
        await store.backfill_embeddings()

        asked: list[tuple[str, Any]] = []
        fetchall = store.db.fetchall

        async def recording(sql: str, params: Any = ()) -> list[Any]:
            asked.append((sql, params))
            return await fetchall(sql, params)

        monkeypatch.setattr(store.db, "fetchall", recording)
        assert await store.missing_embeddings() == 0
        await store.backfill_embeddings()
        monkeypatch.undo()

        looked = {sql: params for sql, params in asked if "NOT EXISTS" in sql}
        assert len(looked) == 3  # the count, and the pass's selection of memories and messages
        for sql, params in looked.items():
            plan = [r[3] for r in await store.db.fetchall(f"EXPLAIN QUERY PLAN {sql}", params)]
            probes = [step for step in plan if "embeddings_by_m" in step]
            assert probes, plan
            assert all("USING COVERING INDEX embeddings_by_me" in step for step in probes), plan


async def test_the_pass_drops_other_vectors_without_reading_the_table(tmp_path, monkeypatch):
    """At the end of every pass with nothing missing (after every memory written) the drop of
    other models' and sizes' vectors read every row (`model != ?`): 0.5 s at 1M, in a write
    transaction. Planned now as searches of the (model, dim) index; and it drops what it
    should."""
    path = tmp_path / "memory.db"
    embedder = BagOfWordsEmbedder("test/bow-64", 64)
    async with await MemoryStore.open(path, embedder=embedder) as store:
        for value in VALUES:
            await store.add_memory(value)
        await store.backfill_embeddings()
        async with store.db.transaction():  # an old model's vector, and one of another size
            await store.db.execute(
                "INSERT INTO embeddings (memory_id, model, dim, content_hash, vector, bits,"
                " created_at) SELECT memory_id, 'old/model', dim, content_hash, vector, bits,"
                " created_at FROM embeddings LIMIT 1"
            )
        asked: list[tuple[str, Any]] = []
        execute = store.db.execute

        async def recording(sql: str, params: Any = ()) -> Any:
            asked.append((sql, params))
            return await execute(sql, params)

        monkeypatch.setattr(store.db, "execute", recording)
        await store.backfill_embeddings()
        monkeypatch.undo()
        [(sql, params)] = [(s, p) for s, p in asked if s.startswith("DELETE FROM embeddings")]
        plan = [r[3] for r in await store.db.fetchall(f"EXPLAIN QUERY PLAN {sql}", params)]
        assert not [step for step in plan if step.startswith("SCAN")], plan
        models = await store.db.fetchall("SELECT DISTINCT model, dim FROM embeddings")
        assert [tuple(r) for r in models] == [("test/bow-64", 64)]
