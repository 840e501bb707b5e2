"""What only a shared server has: row-level security between users (proved with hand-written
SQL over a user's own connection), several daemons on one user, and connection failures."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from navi_desktop.errors import NotFound
from navi_desktop.memory import NewMemory
from navi_desktop.memory.pg import PgMemoryStore, StorageUnavailable, shown
from navi_desktop.memory.pg.db import PgDatabase, dollars
from navi_desktop.memory.pg.schema import migrate
from navi_desktop.memory.pg.store import watch_changes
from navi_desktop.memory.sessions import SessionWrite
from tests.pg_support import as_role, profile_name


async def _role(dsn: str, name: str, *, admin: bool = False) -> str:
    """A login role for one machine's daemon, on a server an administrator set up once
    (the schema and the pgvector extension, created by the superuser)."""
    setup = await PgDatabase.connect(dsn, max_size=1)
    try:
        await migrate(setup)
    finally:
        await setup.close()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            f"DO $$ BEGIN CREATE ROLE {name} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL;"
            " END $$"
        )
        if admin:
            await conn.execute(f"GRANT navi_admin TO {name}")
    finally:
        await conn.close()
    return as_role(dsn, name)


async def test_one_user_cannot_read_or_change_another_users_rows(pg_dsn):
    alice_dsn = await _role(pg_dsn, "alice_laptop")
    bob_dsn = await _role(pg_dsn, "bob_desktop")
    async with await PgMemoryStore.open(alice_dsn, profile_name()) as alice:
        await alice.create_session(session_id="s1")
        await alice.save_message("s1", "user", "my diagnosis is private")
        secret = (await alice.add_memory("asthma", category="health", key="condition")).memory
        async with await PgMemoryStore.open(bob_dsn, profile_name()) as bob:
            assert await bob.search("asthma diagnosis", kinds=["fact", "message"]) == []
            with pytest.raises(NotFound):
                await bob.get(secret.id)
        conn = await asyncpg.connect(bob_dsn, server_settings={"search_path": "navi, public"})
        try:
            for table in ("memories", "messages", "sessions", "memory_history", "meta"):
                query = f"SELECT * FROM {table} WHERE user_id = $1"
                assert await conn.fetch(query, alice.user_id) == [], table
            assert await conn.fetch("SELECT * FROM users WHERE id = $1", alice.user_id) == []
            # naming alice's profile outright does not help
            await conn.execute(f"SET navi.user_id = '{alice.user_id}'")
            assert await conn.fetch("SELECT * FROM memories") == []
            assert await conn.execute("UPDATE memories SET value = 'x'") == "UPDATE 0"
            assert await conn.execute("DELETE FROM messages") == "DELETE 0"
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
                await conn.execute(
                    "INSERT INTO memories (user_id, kind, value, source, created_at,"
                    " updated_at, valid_from) VALUES ($1, 'fact', 'planted', 'import', '', '', '')",
                    alice.user_id,
                )
            taken = "UPDATE users SET owner_role = current_user WHERE id = $1"
            assert await conn.execute(taken, alice.user_id) == "UPDATE 0"
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
                await conn.execute("UPDATE users SET owner_role = 'alice_laptop'")
        finally:
            await conn.close()
        assert (await alice.get(secret.id)).value == "asthma"
        assert [m.content for m in await alice.messages("s1")] == ["my diagnosis is private"]


async def test_an_admin_may_read_everyone_but_change_no_one(pg_dsn):
    alice_dsn = await _role(pg_dsn, "alice_laptop")
    admin_dsn = await _role(pg_dsn, "household_admin", admin=True)
    async with await PgMemoryStore.open(alice_dsn, profile_name()) as alice:
        fact = (await alice.add_memory("Lisbon", key="home city")).memory
        conn = await asyncpg.connect(admin_dsn, server_settings={"search_path": "navi, public"})
        try:
            rows = await conn.fetch("SELECT value FROM memories WHERE id = $1", fact.id)
            assert [r[0] for r in rows] == ["Lisbon"]
            assert await conn.execute("UPDATE memories SET value = 'x'") == "UPDATE 0"
        finally:
            await conn.close()
        assert (await alice.get(fact.id)).value == "Lisbon"


async def test_two_daemons_on_one_user_share_memory_and_hear_changes(pg_dsn):
    owner_dsn = await _role(pg_dsn, "carol")
    laptop_dsn = await _role(pg_dsn, "carol_laptop")
    desktop_dsn = await _role(pg_dsn, "carol_desktop")
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute("GRANT carol TO carol_laptop, carol_desktop")
    await conn.close()
    del owner_dsn
    name = profile_name()
    laptop = await PgMemoryStore.open(laptop_dsn, name, owner="carol")
    desktop = await PgMemoryStore.open(desktop_dsn, name, owner="carol")
    heard: asyncio.Queue[int] = asyncio.Queue()
    feed = await watch_changes(desktop, heard.put_nowait)
    try:
        assert laptop.user_id == desktop.user_id
        learned = (await laptop.add_memory("Rust", key="language")).memory
        assert await asyncio.wait_for(heard.get(), 5) == learned.id
        assert (await desktop.get(learned.id)).value == "Rust"
        # one session end, committed by both: the second sees the watermark and adds nothing
        await laptop.create_session(session_id="s1")
        last = await laptop.save_message("s1", "user", "I moved to Oslo")
        writes = [SessionWrite("add", NewMemory("Oslo", key="home city", source="conversation"))]
        first, second = await asyncio.gather(
            laptop.commit_session("s1", last.id, writes, "Moved to Oslo."),
            desktop.commit_session("s1", last.id, writes, "Moved to Oslo."),
        )
        assert sorted([bool(first.ids), bool(second.ids)]) == [False, True]
        _, episodes = await desktop.list_memories(kind="episode")
        assert episodes == 1
        # forgetting on one removes it for both
        await desktop.forget(learned.id)
        with pytest.raises(NotFound):
            await laptop.get(learned.id)
    finally:
        await feed.close()
        await laptop.close()
        await desktop.close()


async def test_unreachable_server_is_one_line_with_the_password_hidden(tmp_path):
    dsn = f"postgresql://navi:s3cret@/navi?host={tmp_path}&port=1"
    with pytest.raises(StorageUnavailable) as caught:
        await PgMemoryStore.open(dsn, "default")
    message = str(caught.value)
    assert "not reachable" in message and "s3cret" not in message and "***" in message
    assert "\n" not in message


def test_shown_hides_passwords_in_every_form():
    assert shown("postgresql://u:pw@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert "pw" not in shown("host=h user=u password=pw dbname=db")
    assert shown("postgresql://u@h/db") == "postgresql://u@h/db"


async def test_parts_of_words_are_found_when_no_whole_word_is(pg_dsn):
    """The server design's substring fallback: pg_trgm's indexes where it is installed, a
    plain ILIKE where it is not (pgserver has no pg_trgm; NAVI_TEST_PG_DSN can name one)."""
    async with await PgMemoryStore.open(pg_dsn, profile_name()) as store:
        trip = (await store.add_memory("Kilimanjaro in March", key="next trip")).memory
        await store.add_memory("100 percent rye bread", key="bread")
        hits = await store.search("manjaro")
        assert [h.id for h in hits] == [trip.id]
        assert await store.search("%") == []  # a pattern character is a character
        assert await store.search("r_e") == []
        assert [h.id for h in await store.search("kilimanjaro")] == [trip.id]  # words first
        stats = await store.stats()
        assert stats["substring_search"] in ("pg_trgm", "ILIKE (pg_trgm not installed)")


async def test_a_refused_login_and_a_missing_database_are_one_line_each(pg_dsn):
    stranger = as_role(pg_dsn, "nobody_here")  # no such role: the server refuses the login
    with pytest.raises(StorageUnavailable) as caught:
        await PgMemoryStore.open(stranger, "default")
    message = str(caught.value)
    assert "refused the login" in message and "[memory] dsn" in message
    assert "\n" not in message
    parts = pg_dsn.split("?", 1)
    missing = (
        parts[0].rsplit("/", 1)[0] + "/no_such_db" + ("?" + parts[1] if len(parts) > 1 else "")
    )
    with pytest.raises(StorageUnavailable) as caught:
        await PgMemoryStore.open(missing, "default")
    assert "createdb" in str(caught.value) and "\n" not in str(caught.value)


async def test_word_search_through_the_index_keeps_to_profiles_the_login_may_read(pg_dsn):
    # Row-level security keeps @@ out of index conditions, so word search reads the index
    # through functions owned by a superuser; they must check what the caller may read.
    async with await PgMemoryStore.open(pg_dsn, profile_name()) as first:
        assert first.indexed_words  # a superuser's open creates them
    alice_dsn = await _role(pg_dsn, "alice_laptop")
    bob_dsn = await _role(pg_dsn, "bob_desktop")
    admin_dsn = await _role(pg_dsn, "household_admin", admin=True)
    count = "SELECT word_match_count('memories', $1, to_tsquery('english', 'asthma'), 10)"
    async with await PgMemoryStore.open(alice_dsn, profile_name()) as alice:
        assert alice.indexed_words
        secret = (await alice.add_memory("asthma inhaler", key="condition")).memory
        assert [h.memory.id for h in await alice.search("asthma")] == [secret.id]
        for dsn, seen in ((alice_dsn, 1), (bob_dsn, 0), (admin_dsn, 1)):
            conn = await asyncpg.connect(dsn, server_settings={"search_path": "navi, public"})
            try:
                assert await conn.fetchval(count, alice.user_id) == seen
                rows = await conn.fetch(
                    "SELECT id FROM word_matches('memories', $1, to_tsquery('english', 'asthma'),"
                    " 10)",
                    alice.user_id,
                )
                assert [r[0] for r in rows] == [secret.id] * seen
                with pytest.raises(asyncpg.RaiseError, match="no words to match"):
                    await conn.fetch(
                        "SELECT * FROM word_matches('users', $1, to_tsquery('x'), 1)",
                        alice.user_id,
                    )
            finally:
                await conn.close()


async def test_word_search_finds_the_same_through_the_index_as_by_a_scan(pg_dsn):
    async with await PgMemoryStore.open(pg_dsn, profile_name()) as store:
        await store.create_session(session_id="s1")
        await store.save_message("s1", "user", "we hiked the Alps with Maria in June")
        for value, key in [
            ("Lisbon", "home city"),
            ("hiking in the Alps", "hobby"),
            ("oat milk in coffee", "coffee order"),
            ("Maria", "sister"),
        ]:
            await store.add_memory(value, key=key)
        for query in ("Alps hiking", "coffee", "where is home", "Maria June", "the"):
            for kinds in (None, ["message"]):
                store.indexed_words = True
                indexed = [(h.kind, h.id) for h in await store.search(query, kinds=kinds)]
                store.indexed_words = False
                scanned = [(h.kind, h.id) for h in await store.search(query, kinds=kinds)]
                assert indexed == scanned, (query, kinds)
                assert indexed or query == "the" or kinds, query


async def test_a_small_profile_on_a_shared_server_keeps_its_nearest_vectors(pg_dsn, monkeypatch):
    # HNSW's candidates are every profile's, filtered afterwards: with the default 40 (a
    # SET LOCAL outside a transaction had no effect) a profile holding a fifth of the
    # server's vectors got a handful back. Through the index, then exactly, it gets them all.
    import numpy as np

    import navi_desktop.memory.pg.vector_search as pg_vectors
    from navi_desktop.memory.search_filters import make_filters
    from tests.fakes import BagOfWordsEmbedder

    embedder = BagOfWordsEmbedder()
    async with await PgMemoryStore.open(pg_dsn, profile_name(), embedder=embedder) as big:
        for i in range(120):
            await big.add_memory(f"shared word{i} garden {i % 7}")
        await big.backfill_embeddings()
        async with await PgMemoryStore.open(pg_dsn, profile_name(), embedder=embedder) as small:
            mine = {(await small.add_memory(f"garden note {i}")).memory.id for i in range(30)}
            await small.backfill_embeddings()
            big_conn = await asyncpg.connect(pg_dsn)
            await big_conn.execute("ANALYZE navi.embeddings")  # the server's count of vectors
            await big_conn.close()
            vector = np.asarray((await embedder.embed(["garden"], query=True))[0], np.float32)
            filters = make_filters(None, None, None, None, None, False)
            for exact in (False, True):  # through HNSW, then exactly
                monkeypatch.setattr(pg_vectors, "EXACT_ALWAYS", 2_000 if exact else 0)
                monkeypatch.setattr(pg_vectors, "EXACT_UP_TO", 10_000 if exact else 0)
                async with small.db.reading():
                    # no sort, so the planner takes the HNSW index, as with many rows
                    await small.db.execute("SET enable_sort = off")
                    found = await small._pg_knn(vector, filters)
                    await small.db.execute("RESET enable_sort")
                assert {key[1] for key, _ in found} == mine, exact


def test_sqlite_placeholders_are_numbered_as_sqlite_numbers_them():
    assert dollars("a = ? AND b = ?") == "a = $1 AND b = $2"
    assert dollars("x = ?2 AND y = ?1 AND z = ?") == "x = $2 AND y = $1 AND z = $3"
    assert dollars("a = $1 AND b = ?") == "a = $1 AND b = $2"  # $n stays, and counts
    assert dollars("note = '?' AND id = ?") == "note = '?' AND id = $1"
    assert dollars("note = 'it''s ?' AND id = ?") == "note = 'it''s ?' AND id = $1"
    assert dollars("SELECT 1") == "SELECT 1"


async def test_a_statement_written_the_files_way_runs_on_the_server(pg_dsn):
    db = await PgDatabase.connect(pg_dsn, max_size=1)
    try:
        async with db.reading():
            assert await db.scalar("SELECT ?::text || '?' || ?1::text", ("a",)) == "a?a"
            rows = await db.fetchall("SELECT x FROM unnest(?::int[]) x WHERE x > ?", ([1, 5], 2))
            assert [r[0] for r in rows] == [5]
        async with db.transaction():
            await db.execute("CREATE TEMP TABLE t (x int)")
            await db.executemany("INSERT INTO t VALUES (?)", [(1,), (2,), (3,)])
            assert await db.execute("DELETE FROM t WHERE x >= ?", (2,)) == 2  # rows touched
    finally:
        await db.close()
