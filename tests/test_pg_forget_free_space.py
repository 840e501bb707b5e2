"""Forgetting on a real PostgreSQL: ``compact`` rewrites every table of Navi's schema (old row
versions of any of them may hold the text), a VACUUM that is ended or waits on a lock leaves
the forget done and says how to finish, a login that does not own the tables is told who
may compact, and a save racing a forget on another connection cannot keep the value."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from navi_desktop.errors import NotFound
from navi_desktop.memory.pg import PgMemoryStore
from navi_desktop.memory.scrub import PENDING_KEY
from tests.pg_support import as_role, profile_name

# Every table of the schema that has a column able to hold text a user typed.
TEXT_TABLES = """
SELECT DISTINCT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
WHERE c.relnamespace = 'navi'::regnamespace AND c.relkind = 'r' AND a.attnum > 0
  AND NOT a.attisdropped AND a.atttypid IN ('text'::regtype, 'tsvector'::regtype)
"""


async def _wait_for(conn: asyncpg.Connection, sql: str, *args: object) -> object:
    """Poll until ``sql`` returns a row (generous bound: a loaded machine is slow)."""
    for _ in range(600):
        value = await conn.fetchval(sql, *args)
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"never true: {sql}")


async def _hold(conn: asyncpg.Connection, table: str) -> asyncpg.transaction.Transaction:
    """A transaction on ``conn`` holding the lock a VACUUM of ``table`` waits for (as an
    autovacuum, an index build or a pg_dump would); roll it back to let go."""
    tx = conn.transaction()
    await tx.start()
    await conn.execute(f"LOCK TABLE navi.{table} IN SHARE UPDATE EXCLUSIVE MODE")
    return tx


async def test_compact_rewrites_every_table_that_holds_text(pg_dsn):
    admin = await asyncpg.connect(pg_dsn)
    try:
        async with await PgMemoryStore.open(pg_dsn, profile_name()) as store:
            await store.create_session("the vault", session_id="s1")
            await store.save_message("s1", "user", "the vault code is 7788")
            fact = (await store.add_memory("vault code 7788", key="vault")).memory
            tables = {r[0] for r in await admin.fetch(TEXT_TABLES)}
            assert {"sessions", "messages", "meta", "reply_feedback", "entity_aliases"} <= tables
            files = "SELECT relname, relfilenode FROM pg_class WHERE relname = ANY($1::text[])" + (
                " AND relnamespace = 'navi'::regnamespace"
            )
            before = dict(await admin.fetch(files, list(tables)))
            await store.forget(fact.id)
            await store.compact()
            after = dict(await admin.fetch(files, list(tables)))
            kept = sorted(t for t in tables if before[t] == after[t])
            assert kept == [], f"not rewritten, old rows may stay on disk: {kept}"
    finally:
        await admin.close()


async def test_a_vacuum_ended_by_the_administrator_leaves_the_forget_done(pg_dsn):
    admin = await asyncpg.connect(pg_dsn)
    locker = await asyncpg.connect(pg_dsn)
    try:
        async with await PgMemoryStore.open(pg_dsn, profile_name()) as store:
            fact = (await store.add_memory("the gate code is 4417", key="gate")).memory
            tx = await _hold(locker, "memories")
            forgetting = asyncio.create_task(store.forget(fact.id))
            pid = await _wait_for(
                admin,
                "SELECT pid FROM pg_stat_activity WHERE query LIKE 'VACUUM%memories'"
                " AND wait_event_type = 'Lock'",
            )
            await admin.execute("SELECT pg_terminate_backend($1)", pid)
            report = await forgetting
            await tx.rollback()
            assert report.forgotten == [fact.id]
            assert "VACUUM did not finish" in report.scrub_pending
            assert "navi memory compact" in report.scrub_pending
            with pytest.raises(NotFound):
                await store.get(fact.id)
            (pending,) = await store.pending_scrubs()
            assert pending["ids"] == [fact.id]
            assert [p["ids"] for p in await store.retry_scrubs()] == [[fact.id]]
            assert await store.pending_scrubs() == []
    finally:
        await locker.close()
        await admin.close()


async def test_a_vacuum_waiting_on_a_lock_gives_up_in_time(pg_dsn, monkeypatch):
    from navi_desktop.memory.pg import free_space

    monkeypatch.setattr(free_space, "LOCK_S", 0.5)
    locker = await asyncpg.connect(pg_dsn)
    try:
        async with await PgMemoryStore.open(pg_dsn, profile_name()) as store:
            fact = (await store.add_memory("the shed code is 9035", key="shed")).memory
            tx = await _hold(locker, "sessions")
            # released long after the bound: without one, the forget would wait for it
            asyncio.get_running_loop().call_later(30, lambda: asyncio.ensure_future(tx.rollback()))
            report = await store.forget(fact.id)
            assert report.forgotten == [fact.id] and "lock timeout" in report.scrub_pending
            with pytest.raises(NotFound):
                await store.get(fact.id)
            with pytest.raises(Exception, match="VACUUM did not finish"):
                await store.compact()
    finally:
        await locker.close()


def test_compact_by_a_login_that_does_not_own_the_tables_says_the_forget_is_done(home, cli, pg_dsn):
    async def make_role() -> None:
        conn = await asyncpg.connect(pg_dsn)
        try:
            await conn.execute(
                "DO $$ BEGIN CREATE ROLE dora_laptop LOGIN; EXCEPTION WHEN duplicate_object"
                " THEN NULL; END $$"
            )
        finally:
            await conn.close()

    asyncio.run(make_role())
    owner_dsn = pg_dsn
    (home / "config").mkdir(parents=True, exist_ok=True)
    config = home / "config" / "config.toml"

    def use(dsn: str) -> None:
        config.write_text(f'[memory]\nbackend = "postgres"\ndsn = "{dsn}"\n')

    use(owner_dsn)
    assert cli("list")[0] == 0  # the schema, made by its owner
    use(as_role(pg_dsn, "dora_laptop"))
    code, out, err = cli("--json", "add", "loft", "NUMBAT 5521")
    assert code == 0, err
    memory_id = json.loads(out)["memory"]["id"]
    code, out, err = cli("forget", str(memory_id), "--yes", "--compact")
    assert code == 1
    assert out.startswith(f"Forgot #{memory_id}.")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "forgotten, but not compacted" in err and "navi memory compact" in err
    assert "role " in err  # who may: the tables' owner, by name
    code, out, err = cli("show", str(memory_id))
    assert code != 0 and "no memory" in err
    code, _, err = cli("compact")
    assert code == 1 and "only the owner" in err and err.count("\n") == 1
    assert [s["ids"] for s in waiting_scrubs(cli)] == [[memory_id]]
    use(owner_dsn)
    code, out, err = cli("compact")
    assert code == 0 and out.startswith("Compacted:"), err
    # The owner's compact vacuumed every table: the login's own scrub no longer waits (it
    # was listed for ever, as the login may not vacuum and never cleared it).
    use(as_role(pg_dsn, "dora_laptop"))
    assert waiting_scrubs(cli) == []


def waiting_scrubs(cli) -> list[dict]:
    code, out, err = cli("--json", "stats")
    assert code == 0, err
    return json.loads(out)["pending_scrubs"]


async def test_a_save_racing_a_forget_on_another_connection_cannot_keep_the_value(pg_dsn):
    """Daemon A saves a memory containing the value while daemon B forgets it. A's save is
    held inside its transaction (a third writer's uncommitted row with the same entity name),
    after it checked the forgotten list: B's forget must not finish without seeing it."""
    profile = profile_name()
    value = "the vault code is 7788"
    async with (
        await PgMemoryStore.open(pg_dsn, profile) as a,
        await PgMemoryStore.open(pg_dsn, profile) as b,
    ):
        old = (await b.add_memory(value, source="user_explicit")).memory
        third = await asyncpg.connect(pg_dsn)
        try:
            tx = third.transaction()
            await tx.start()
            await third.execute(
                "INSERT INTO navi.entities (user_id, name, norm) VALUES ($1, 'Zorblax', 'zorblax')",
                a.user_id,
            )
            saving = asyncio.create_task(
                a.add_memory(f"Zorblax says {value}", source="conversation")
            )
            await _wait_for(  # A is inside its transaction, waiting on the third writer
                third,
                "SELECT 1 FROM pg_stat_activity"
                " WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))",
            )
            forgetting = asyncio.create_task(b.forget(old.id))
            # B either finishes (it did not wait for A) or waits for A's transaction
            waiting = "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            for _ in range(600):
                if forgetting.done() or await third.fetchval(waiting):
                    break
                await asyncio.sleep(0.05)
            await tx.rollback()
            await saving
            report = await forgetting
        finally:
            await third.close()
        assert report.forgotten[0] == old.id
        async with b.db.reading():
            left = await b.db.fetchall("SELECT id, value FROM memories WHERE value LIKE '%7788%'")
        assert left == []


@pytest.mark.parametrize("when", ["garbage", 7, None, "2026-11-28T05:00:00"])
async def test_a_waiting_scrub_with_an_unreadable_time_is_listed_not_fatal(pg_dsn, when):
    """A record whose server time cannot be read (damaged, or without a zone) is listed as
    waiting, as an older version's; it stopped `navi memory stats` with a ValueError."""
    async with await PgMemoryStore.open(pg_dsn, profile_name()) as store:
        record = {"ids": [1], "since": "2026-11-28T05:00:00.000Z", "reason": "test"}
        async with store.db.transaction():
            await store._set_meta(PENDING_KEY, json.dumps([record | {"server_since": when}]))
        assert [p["ids"] for p in await store.pending_scrubs()] == [[1]]
        assert (await store.stats())["pending_scrubs"][0]["ids"] == [1]
