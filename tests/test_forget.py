"""Forgetting removes every trace, and the text is gone from the file's bytes."""

from __future__ import annotations

import asyncio

import pytest

from navi_desktop.errors import NotFound
from navi_desktop.memory import MemoryStore, NewMemory
from navi_desktop.memory.failures import disk_full
from navi_desktop.memory.scrub import DISK_FULL, UNFINISHED
from navi_desktop.pipeline.forgetting import finish_scrubs
from tests.fakes import BagOfWordsEmbedder

SECRET_WORDS = ("Zanzibarquux", "Vrellingmoor")


def file_bytes(path):
    data = path.read_bytes()
    wal = path.with_name(path.name + "-wal")
    return data + (wal.read_bytes() if wal.exists() else b"")


async def test_forget_removes_every_trace_and_the_bytes(tmp_path):
    path = tmp_path / "memory.db"
    secret = f"{SECRET_WORDS[0]} clinic appointment with Dr {SECRET_WORDS[1]}"
    embedder = BagOfWordsEmbedder()
    async with await MemoryStore.open(path, embedder=embedder) as store:
        session = await store.create_session(f"About the {secret}")
        msg = await store.save_message(
            session.id, "user", f"btw I have a {secret} next week, remember it"
        )
        await store.save_message(session.id, "assistant", "Noted.")
        # an earlier version of the same fact, superseded by the one we will forget
        first = await store.add_memory(
            f"{SECRET_WORDS[0]} clinic", category="health", key="appointment", source="conversation"
        )
        fact = (
            await store.add_memory(
                secret,
                category="health",
                key="appointment",
                evidence=secret,
                session_id=session.id,
                source="conversation",
            )
        ).memory
        keep = (
            await store.add_memory("likes green tea", category="preferences", key="drink")
        ).memory
        await store.backfill_embeddings()
        await store.db.execute(
            "INSERT INTO injections (session_id, message_id, memory_id, rank, score, signals, at)"
            " VALUES (?, ?, ?, 1, 0.5, '{}', '2024-01-01T00:00:00Z')",
            (session.id, msg.id, fact.id),
        )
        await store.set_meta("profile_summary", f"The user has a {secret}.")
        assert await store.search(SECRET_WORDS[0])
        await store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

        report = await store.forget(fact.id)
        assert set(report.forgotten) == {first.memory.id, fact.id}
        assert report.redacted_messages == 1

        hits = await store.search(SECRET_WORDS[0], kinds=["fact", "message"], include_inactive=True)
        assert not [h for h in hits if SECRET_WORDS[0] in h.text or h.id in report.forgotten]
        assert [h.id for h in await store.search("green tea")] == [keep.id]
        for table in ("memories", "memory_history", "embeddings", "injections", "entity_links"):
            n = await store.db.scalar(
                f"SELECT count(*) FROM {table} WHERE memory_id IN (?, ?)"
                if table != "memories"
                else "SELECT count(*) FROM memories WHERE id IN (?, ?)",
                (first.memory.id, fact.id),
            )
            assert n == 0, table
        assert await store.db.scalar("SELECT count(*) FROM tombstones") == 2
        # Redacted in place, and marked stale so that it is rewritten from the facts.
        assert await store.get_meta("profile_summary") == "The user has a [forgotten]."
        assert await store.get_meta("profile_summary_stale") == "1"
        assert "[forgotten]" in (await store.messages(session.id))[0].content
        assert (await store.get_session(session.id)).title == "About the [forgotten]"
        names = [r[0] for r in await store.db.fetchall("SELECT norm FROM entities")]
        assert not any(SECRET_WORDS[1].lower() in n for n in names)

    raw = file_bytes(path)
    for word in SECRET_WORDS:
        for form in (word, word.lower(), word.upper()):
            assert form.encode() not in raw, f"{form!r} still in the file"
    assert b"green tea" in raw  # the check looks in the right place


async def test_forgetting_while_searches_run_leaves_no_bytes(tmp_path):
    """Searches read on connections of their own; the forget's checkpoint waits for them
    rather than leaving the text in the write-ahead log."""
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path, embedder=BagOfWordsEmbedder()) as store:
        secret = f"{SECRET_WORDS[0]} opens the vault"
        fact = (await store.add_memory(secret, key="vault code")).memory
        await store.add_memories(
            [NewMemory(f"fact {i} about the vault", key=f"fact {i}") for i in range(300)]
        )
        await store.backfill_embeddings()
        stop = asyncio.Event()
        found: list[int] = []

        async def search_meanwhile() -> None:
            while not stop.is_set():
                found.append(len(await store.search("who opens the vault")))

        searching = [asyncio.create_task(search_meanwhile()) for _ in range(2)]
        await asyncio.sleep(0.1)
        await store.forget(fact.id)
        raw = file_bytes(path)  # the searches are still running
        stop.set()
        await asyncio.gather(*searching)
    assert found and all(found)
    assert SECRET_WORDS[0].encode() not in raw
    assert b"about the vault" in raw


async def test_tombstone_blocks_reextraction_but_not_the_user(tmp_path):
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        m = (
            await store.add_memory("Plays the oboe", key="instrument", source="conversation")
        ).memory
        await store.forget(m.id)
        assert await store.is_forgotten("plays the oboe.", key="Instrument")
        blocked = await store.add_memory("plays the oboe", key="instrument", source="conversation")
        assert blocked.action == "blocked" and blocked.memory is None
        assert (await store.list_memories())[1] == 0
        # the tombstone holds a keyed hash, not the text
        rows = await store.db.fetchall("SELECT * FROM tombstones")
        assert all("oboe" not in " ".join(map(str, tuple(r))) for r in rows)
        again = await store.add_memory("plays the oboe", key="instrument", source="user_explicit")
        assert again.action == "added"
        assert not await store.is_forgotten("plays the oboe", key="instrument")


async def test_forgetting_an_old_version_keeps_the_current_one(tmp_path):
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        old = (await store.add_memory("Berlin", key="city")).memory
        new = (await store.add_memory("Lisbon", key="city")).memory
        await store.forget(old.id)
        current = await store.get(new.id)
        assert current.status == "active" and current.value == "Lisbon"
        with pytest.raises(NotFound, match="no memory"):
            await store.get(old.id)


async def test_a_full_disk_after_the_forget_leaves_its_scrub_pending_until_there_is_space(
    tmp_path, monkeypatch
):
    """The forget is saved whole; the merge of the indexes that follows cannot be (the disk
    filled up meanwhile): the user is told so, and the scrub finishes once there is room."""
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        session = await store.create_session()
        await store.save_message(session.id, "user", f"my locker code is {SECRET_WORDS[0]}")
        fact = (await store.add_memory(SECRET_WORDS[0], key="locker code")).memory
        execute, full = store.db.execute, [True]

        async def execute_on_a_full_disk(sql: str, params=()):
            if full[0] and "'optimize'" in sql:
                raise disk_full(path)  # as SQLITE_FULL is reported
            return await execute(sql, params)

        monkeypatch.setattr(store.db, "execute", execute_on_a_full_disk)
        report = await store.forget(fact.id)
        assert report.forgotten == [fact.id] and report.scrub_pending == DISK_FULL
        with pytest.raises(NotFound):
            await store.get(fact.id)
        [pending] = await store.pending_scrubs()
        assert pending["ids"] == [fact.id] and pending["reason"] == UNFINISHED
        assert await finish_scrubs(store) == []  # still full: tried again later
        full[0] = False  # space is back
        assert [p["ids"] for p in await finish_scrubs(store)] == [[fact.id]]
        assert await store.pending_scrubs() == []
        assert SECRET_WORDS[0].lower().encode() not in file_bytes(path).lower()
