"""No login steers Navi's functions on the server through its search_path: a plain login
that plants temporary relations named as the functions' own (pg_roles, users, memories) and
functions of its own, then calls each function Navi made, stays itself, sees only its own
rows and changes no one else's; and a server made before the fix gets it on update, applied
by whoever may (the tables' owner, or a superuser), with any other login told who that is."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from navi_desktop.memory.pg import PgMemoryStore, StorageUnavailable, schema
from navi_desktop.memory.pg.db import PgDatabase
from navi_desktop.memory.pg.schema import migrate
from navi_desktop.memory.pg.search_indexes import vector_index
from tests.pg_support import as_role, in_database, profile_name, run_sql

ATTACKER = "mallory_laptop"
VICTIM = "alice_laptop"
TABLES_OWNER = "navi_tables_owner"
SEARCH_PATH = {"search_path": "navi, public"}  # as Navi connects

# Run as the login: its function records who it runs as and, when that is anyone else (a
# SECURITY DEFINER function's owner), makes the login a superuser. The relation named
# pg_roles says every role is the login, so each membership check it answers passes.
_PLANT = """
CREATE TEMP TABLE seen (who name, super boolean);
CREATE FUNCTION pg_temp.escalate() RETURNS boolean LANGUAGE plpgsql COST 0.0001 AS $$
BEGIN
    INSERT INTO pg_temp.seen SELECT current_user, rolsuper FROM pg_catalog.pg_roles
        WHERE rolname = current_user;
    IF current_user <> session_user THEN
        EXECUTE pg_catalog.format('ALTER ROLE %I SUPERUSER', session_user);
    END IF;
    RETURN true;
END $$;
CREATE TEMP {kind} pg_roles AS
    SELECT r.rolname, (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = session_user) AS oid
    FROM pg_catalog.pg_roles r WHERE pg_temp.escalate();
CREATE TEMP TABLE users AS SELECT id, session_user::name AS owner_role FROM navi.users;
CREATE TEMP TABLE memories (id bigint, user_id bigint, tsv tsvector);
"""

# The word search functions as Navi made them before schema step 0008 (a superuser's open).
_WORD_MATCHES_BEFORE = """
CREATE OR REPLACE FUNCTION navi.readable(user_row bigint) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = navi, pg_catalog AS $$
    SELECT EXISTS (SELECT 1 FROM users u JOIN pg_roles r ON r.rolname = u.owner_role
                   WHERE u.id = user_row AND pg_has_role(session_user, r.oid, 'MEMBER'))
        OR EXISTS (SELECT 1 FROM pg_roles r
                   WHERE r.rolname = 'navi_admin' AND pg_has_role(session_user, r.oid, 'MEMBER'))
$$;
CREATE OR REPLACE FUNCTION navi.word_matches(
    tbl text, user_row bigint, q tsquery, newest integer
) RETURNS TABLE (id bigint, rank real)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = navi, pg_catalog AS $$
BEGIN
    IF tbl NOT IN ('memories', 'messages') THEN
        RAISE EXCEPTION 'no words to match in %', tbl;
    END IF;
    IF NOT readable(user_row) THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT m.id, ts_rank_cd(''{0, 0, 0.5, 1}'', m.tsv, $1) FROM'
        ' (SELECT t.id, t.tsv FROM %I t WHERE t.user_id = $2 AND t.tsv @@ $1'
        '  ORDER BY t.id DESC LIMIT $3) m', tbl)
        USING q, user_row, newest;
END $$;
CREATE OR REPLACE FUNCTION navi.word_match_count(
    tbl text, user_row bigint, q tsquery, cap integer
) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = navi, pg_catalog AS $$
DECLARE n bigint;
BEGIN
    IF tbl NOT IN ('memories', 'messages') THEN
        RAISE EXCEPTION 'no words to match in %', tbl;
    END IF;
    IF NOT readable(user_row) THEN
        RETURN 0;
    END IF;
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %I t'
                   ' WHERE t.user_id = $2 AND t.tsv @@ $1 LIMIT $3) c', tbl)
        INTO n USING q, user_row, cap;
    RETURN n;
END $$;
GRANT EXECUTE ON FUNCTION navi.readable(bigint),
    navi.word_matches(text, bigint, tsquery, integer),
    navi.word_match_count(text, bigint, tsquery, integer) TO PUBLIC;
"""


async def _login(superuser: str, name: str) -> str:
    await run_sql(
        superuser,
        f"DO $$ BEGIN CREATE ROLE {name} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$",
    )
    return as_role(superuser, name)


async def _may_call(conn: Any, sql: str, *args: Any) -> Any:
    """The answer, or None where the function is not this login's to call (or is gone)."""
    try:
        async with conn.transaction():
            return await conn.fetchval(sql, *args)
    except (asyncpg.InsufficientPrivilegeError, asyncpg.UndefinedFunctionError):
        return None


async def _attack(superuser: str, dsn: str, victim: int, kind: str) -> None:
    """The attacking login (with a profile and a fact of its own) plants its relations and
    calls every Navi function, then reads and writes: it must stay itself, see only its own
    rows and change none of the victim's."""
    async with await PgMemoryStore.open(dsn, profile_name()) as own:
        mine = (await own.add_memory("my own secret note", key="note")).memory
    conn = await asyncpg.connect(dsn, server_settings=SEARCH_PATH)
    try:
        await conn.execute(_PLANT.format(kind=kind))
        words = "to_tsquery('english', 'secret')"
        calls = {
            "mine": await _may_call(conn, "SELECT navi.mine($1)", VICTIM),
            "is_admin": await _may_call(conn, "SELECT navi.is_admin()"),
            "profile_id": await _may_call(conn, "SELECT navi.profile_id()"),
            "readable": await _may_call(conn, "SELECT navi.readable($1)", victim),
            "word_matches": await _may_call(
                conn, f"SELECT count(*) FROM navi.word_matches('memories', $1, {words}, 9)", victim
            ),
            "word_match_count": await _may_call(
                conn, f"SELECT navi.word_match_count('memories', $1, {words}, 9)", victim
            ),
        }
        # the trigger, on a write of its own profile
        await conn.execute(f"SET navi.user_id = '{own.user_id}'")
        await conn.execute("UPDATE navi.memories SET pinned = 1 WHERE id = $1", mine.id)
        await conn.execute("RESET navi.user_id")
        me = "SELECT current_user, rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user"
        taken = "UPDATE navi.memories SET value = 'overwritten' WHERE user_id = $1"
        observed = {
            "calls that granted something": {name for name, got in calls.items() if got},
            "memories read": {r[0] for r in await conn.fetch("SELECT value FROM navi.memories")},
            "profiles read, by owner": {
                r[0] for r in await conn.fetch("SELECT owner_role FROM navi.users")
            },
            "victim's rows changed": await conn.execute(taken, victim),
            "login after": tuple(await conn.fetchrow(me)),
            "its code ran as": {
                tuple(r) for r in await conn.fetch("SELECT who, super FROM pg_temp.seen")
            }
            - {(ATTACKER, False)},
        }
        assert observed == {
            "calls that granted something": set(),
            "memories read": {"my own secret note"},
            "profiles read, by owner": {ATTACKER},
            "victim's rows changed": "UPDATE 0",
            "login after": (ATTACKER, False),
            "its code ran as": set(),
        }
    finally:
        await conn.close()
        await run_sql(superuser, f"ALTER ROLE {ATTACKER} NOSUPERUSER")  # had it worked


async def _victim(dsn: str) -> tuple[int, str]:
    """The victim's profile, with a secret fact in it: its user row and name."""
    async with await PgMemoryStore.open(dsn, profile_name()) as alice:
        await alice.add_memory("secret of alice: the safe code is 1234", key="safe code")
        return alice.user_id, alice.profile


async def _victim_kept(superuser: str, user_id: int) -> None:
    conn = await asyncpg.connect(superuser)
    try:
        values = await conn.fetch("SELECT value FROM navi.memories WHERE user_id = $1", user_id)
        assert [r[0] for r in values] == ["secret of alice: the safe code is 1234"]
    finally:
        await conn.close()


@pytest.mark.parametrize("kind", ["VIEW", "TABLE"])
async def test_a_login_cannot_steer_navis_functions_through_its_search_path(pg_dsn, kind):
    async with await PgMemoryStore.open(pg_dsn, profile_name()) as first:
        assert first.indexed_words  # a superuser's open made word search's functions
    victim_dsn = await _login(pg_dsn, VICTIM)
    attacker = await _login(pg_dsn, ATTACKER)
    victim, _ = await _victim(victim_dsn)
    await _attack(pg_dsn, attacker, victim, kind)
    await _victim_kept(pg_dsn, victim)


@asynccontextmanager
async def _server_before(superuser: str, steps: int) -> AsyncIterator[tuple[str, str]]:
    """A database whose Navi tables a plain role owns, made by the first ``steps`` schema
    steps, with word search's functions as a superuser made them then: (superuser DSN,
    owner DSN) on it. Dropped after."""
    name = f"navi_before_{uuid.uuid4().hex[:8]}"
    await _login(superuser, TABLES_OWNER)
    await run_sql(superuser, f"CREATE DATABASE {name} OWNER {TABLES_OWNER}")
    admin = in_database(superuser, name)
    try:
        await run_sql(admin, "CREATE EXTENSION vector")
        owner = as_role(admin, TABLES_OWNER)
        db = await PgDatabase.connect(owner, max_size=1, query_s=None)
        try:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:steps])
                await migrate(db)
        finally:
            await db.close()
        await run_sql(admin, _WORD_MATCHES_BEFORE)
        yield admin, owner
    finally:
        await run_sql(superuser, f"DROP DATABASE {name} WITH (FORCE)")


async def test_a_server_made_before_is_fixed_by_a_superusers_update(pg_dsn):
    async with _server_before(pg_dsn, 7) as (admin, _owner):
        async with await PgMemoryStore.open(admin, profile_name()) as first:
            assert first.indexed_words  # made again, not only dropped
        victim, _ = await _victim(as_role(admin, VICTIM))
        await _attack(admin, await _login(admin, ATTACKER), victim, "VIEW")
        await _victim_kept(admin, victim)


async def test_a_server_made_before_is_fixed_by_its_owner_and_others_are_told_who(pg_dsn):
    async with _server_before(pg_dsn, 7) as (admin, owner):
        victim_dsn = await _login(admin, VICTIM)
        with pytest.raises(StorageUnavailable) as refused:
            await PgMemoryStore.open(victim_dsn, profile_name())
        line = str(refused.value)
        assert "0008_functions_immune_to_search_path" in line and "\n" not in line
        assert f"owner of Navi's tables (role {TABLES_OWNER}) or a superuser" in line
        # The owner may not replace a superuser's functions: it drops them (the schema is
        # its own), and word search scans until a superuser opens.
        async with await PgMemoryStore.open(owner, profile_name()) as by_owner:
            assert not by_owner.indexed_words
        victim, profile = await _victim(victim_dsn)
        await _attack(admin, await _login(admin, ATTACKER), victim, "VIEW")
        # A daemon that opened before the drop still finds by words, by a scan.
        async with await PgMemoryStore.open(victim_dsn, profile) as alice:
            alice.indexed_words = True
            hits = await alice.search("safe code", kinds=["fact"])
            assert [h.memory.value for h in hits] == ["secret of alice: the safe code is 1234"]
            assert not alice.indexed_words
        async with await PgMemoryStore.open(admin, profile_name()) as by_superuser:
            assert by_superuser.indexed_words
        await _attack(admin, as_role(admin, ATTACKER), victim, "VIEW")
        await _victim_kept(admin, victim)


async def test_an_index_planted_on_a_temporary_table_steers_no_update(pg_dsn):
    # pg_indexes lists every session's temporary indexes: a login named one as the HNSW
    # indexes are named, with a quote and a statement in the name.
    planted = 'embeddings_hnsw_1";CREATE POLICY x ON memories USING (true);--'
    async with _server_before(pg_dsn, 6) as (admin, owner):
        conn = await asyncpg.connect(await _login(admin, ATTACKER))
        try:
            await conn.execute("CREATE TEMP TABLE embeddings (dim integer)")
            quoted = planted.replace('"', '""')
            await conn.execute(f'CREATE INDEX "{quoted}" ON embeddings (dim)')
            await conn.execute('CREATE INDEX "embeddings_hnsw_768" ON embeddings (dim)')
            db = await PgDatabase.connect(owner, max_size=1, query_s=None)
            try:
                assert "0007_vectors_in_the_row" in await migrate(db)
                async with db.reading():
                    assert await vector_index(db, 768)
                    made = await db.scalar(
                        "SELECT count(*) FROM pg_indexes WHERE schemaname = 'navi'"
                        " AND indexname = 'embeddings_hnsw_768'"
                    )
                    assert made == 1
                    assert not await db.scalar("SELECT 1 FROM pg_policies WHERE policyname = 'x'")
            finally:
                await db.close()
        finally:
            await conn.close()
