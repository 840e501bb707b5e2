"""What the server's search needs beyond the schema: indexes and a function that only the
tables' owner may create, made when a store opens as such a role (PgMemoryStore.open). Until
they exist, search works without them, by scans."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from navi_desktop.memory.pg.refusals import NO_RIGHTS, READ_ONLY, sqlstate

# An index is only ever made by a login that may (the tables' owner), on a server that takes
# writes (a standby's is the primary's): search scans meanwhile.
NOT_HERE = (NO_RIGHTS, READ_ONLY)

if TYPE_CHECKING:
    from navi_desktop.memory.pg.db import PgDatabase

log = logging.getLogger(__name__)
HNSW_BUILD_MEMORY_KB = 512 * 1024
BUILD_S = 6 * 3600.0  # an index build may take long; only a server that never answers stops it

TRIGRAM_COLUMNS = ("value", "key", "category")


async def trigram_indexes(db: PgDatabase) -> bool:
    """GIN trigram indexes for the substring fallback, where pg_trgm is installed (created
    by an administrator: ``CREATE EXTENSION pg_trgm``); True when they exist. Only the
    tables' owner may create them; anyone else is served by a scan meanwhile."""

    if not await db.scalar("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'"):
        return False
    try:
        async with db.transaction():
            for column in TRIGRAM_COLUMNS:
                await db.execute(
                    f"CREATE INDEX IF NOT EXISTS memories_{column}_trgm ON memories"
                    f" USING gin ({column} gin_trgm_ops) WITH (fastupdate = off)"
                )
    except Exception as exc:  # the driver's error, or the line db.py made of it
        if sqlstate(exc) not in NOT_HERE:
            raise
        log.info("no trigram indexes yet: only the tables' owner may create them: %s", exc)
        return False
    return True


async def vector_index(db: PgDatabase, dim: int) -> bool:
    """Create the HNSW index for ``dim`` (an expression index on the cast, partial to that
    dimension). Only the tables' owner may: for any other role it is left to the next open
    by the owner, and search scans exactly meanwhile. Returns whether it exists."""

    from navi_desktop.memory.pg.db import SCHEMA

    name = f"embeddings_hnsw_{dim}"
    # In Navi's schema: pg_indexes lists every session's temporary indexes too, and one of
    # that name on any login's temporary table stopped this index from ever being made.
    found = "SELECT 1 FROM pg_catalog.pg_indexes WHERE schemaname = $1 AND indexname = $2"
    if await db.scalar(found, (SCHEMA, name)):
        return True
    try:
        async with db.transaction():
            # An HNSW graph built within maintenance_work_mem builds ~7x faster than one that
            # spills (100k 768-d vectors: 61 s against 7 min at PostgreSQL's default 64 MB).
            # Raised for this build only, and never lowered.
            kb = await db.scalar(
                "SELECT setting::bigint FROM pg_settings WHERE name = 'maintenance_work_mem'"
            )
            if kb is not None and kb < HNSW_BUILD_MEMORY_KB:
                await db.execute(f"SET LOCAL maintenance_work_mem = '{HNSW_BUILD_MEMORY_KB}kB'")
            await db.execute(
                f"CREATE INDEX IF NOT EXISTS {name} ON embeddings"
                f" USING hnsw ((vector::vector({dim})) vector_cosine_ops) WHERE dim = {dim}",
                timeout=BUILD_S,  # minutes for a large profile, past any statement's bound
            )
    except Exception as exc:
        if sqlstate(exc) not in NOT_HERE:
            raise
        log.info(
            "no HNSW index for %d-d vectors yet (only the tables' owner may create it): %s",
            dim,
            exc,
        )
        return False
    return True


# Row-level security keeps a full-text match (@@, not LEAKPROOF) out of index conditions: the
# policies' checks must run first, so a search scanned every row (~50 ms per query at 100k
# memories). These functions read the GIN index as their owner, who bypasses the policies,
# and do the policies' check themselves: the profile must be one the session's login may
# read (its own, or any for navi_admin). The login, not the current role: a session may
# always go back to it (RESET ROLE), so that grants nothing the session has not got.
# They run with their owner's rights, so nothing the caller can name may reach them: their
# search_path is pg_catalog with pg_temp last (unnamed, the caller's temporary schema is
# searched first, and a temporary view named pg_roles ran the caller's code as the owner),
# and every relation and function is named with its schema. Only the two searches are
# anyone's to call.
SEARCH_PATH = "search_path=pg_catalog, pg_temp"  # as pg_proc.proconfig keeps it
WORD_MATCHES_SIGNATURE = "word_matches(text, bigint, tsquery, integer)"
_WORD_MATCHES = """
CREATE OR REPLACE FUNCTION {schema}.readable(user_row bigint) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM {schema}.users u
                   JOIN pg_catalog.pg_roles r ON r.rolname = u.owner_role
                   WHERE u.id = user_row
                     AND pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER'))
        OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                   WHERE r.rolname = 'navi_admin'
                     AND pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER'))
$$;
CREATE OR REPLACE FUNCTION {schema}.word_matches(
    tbl text, user_row bigint, q tsquery, newest integer
) RETURNS TABLE (id bigint, rank real)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF tbl NOT IN ('memories', 'messages') THEN
        RAISE EXCEPTION 'no words to match in %', tbl;
    END IF;
    IF NOT {schema}.readable(user_row) THEN
        RETURN;
    END IF;
    -- The newest matches first, ranked after the cut: ranking is the costly part.
    RETURN QUERY EXECUTE pg_catalog.format(
        'SELECT m.id, pg_catalog.ts_rank_cd(''{{0, 0, 0.5, 1}}'', m.tsv, $1) FROM'
        ' (SELECT t.id, t.tsv FROM {schema}.%I t WHERE t.user_id = $2 AND t.tsv @@ $1'
        '  ORDER BY t.id DESC LIMIT $3) m', tbl)
        USING q, user_row, newest;
END $$;
CREATE OR REPLACE FUNCTION {schema}.word_match_count(
    tbl text, user_row bigint, q tsquery, cap integer
) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE n bigint;
BEGIN
    IF tbl NOT IN ('memories', 'messages') THEN
        RAISE EXCEPTION 'no words to match in %', tbl;
    END IF;
    IF NOT {schema}.readable(user_row) THEN
        RETURN 0;
    END IF;
    EXECUTE pg_catalog.format('SELECT pg_catalog.count(*) FROM (SELECT 1 FROM {schema}.%I t'
                              ' WHERE t.user_id = $2 AND t.tsv @@ $1 LIMIT $3) c', tbl)
        INTO n USING q, user_row, cap;
    RETURN n;
END $$;
REVOKE EXECUTE ON FUNCTION {schema}.readable(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION {schema}.word_matches(text, bigint, tsquery, integer),
    {schema}.word_match_count(text, bigint, tsquery, integer) TO PUBLIC;
"""
_DROP_WORD_MATCHES = """
DROP FUNCTION IF EXISTS {schema}.word_matches(text, bigint, tsquery, integer),
    {schema}.word_match_count(text, bigint, tsquery, integer), {schema}.readable(bigint);
"""


async def word_matches(db: PgDatabase) -> bool:
    """Create the functions that let word search use the GIN indexes (see above), when this
    login bypasses row-level security (a superuser, or BYPASSRLS): owned by any other role,
    they would see only that role's rows. True when they exist, made as above."""
    from navi_desktop.memory.pg.db import SCHEMA

    owner_bypasses = (
        "SELECT r.rolsuper OR r.rolbypassrls FROM pg_catalog.pg_proc p"
        " JOIN pg_catalog.pg_roles r ON r.oid = p.proowner"
        " WHERE p.oid = pg_catalog.to_regprocedure($1) AND $2 = ANY (p.proconfig)"
    )
    found = (f"{SCHEMA}.{WORD_MATCHES_SIGNATURE}", SEARCH_PATH)
    if await db.scalar(owner_bypasses, found):
        return True
    if not await db.scalar(
        "SELECT rolsuper OR rolbypassrls FROM pg_catalog.pg_roles WHERE rolname = current_user"
    ):
        log.info("word search scans: functions that read its index need a superuser to create")
        return False

    try:
        async with db.transaction():
            await db.execute(_WORD_MATCHES.format(schema=SCHEMA))
    # Another daemon creating them at this moment: "tuple concurrently updated" (XX000).
    except Exception as exc:
        if sqlstate(exc) not in ("23505", "XX000", READ_ONLY):
            raise
        log.info("word search functions not created now: %s", exc)
    return bool(await db.scalar(owner_bypasses, found))


async def remake_word_matches(db: PgDatabase) -> None:
    """Schema step 0008: the functions as made before it (see above) are made again where
    this login may replace them (their owner, or a superuser), else dropped, which the
    schema's owner may; a superuser's next open makes them again, and word search scans
    meanwhile."""
    from navi_desktop.memory.pg.db import SCHEMA

    may_replace = await db.scalar(
        "SELECT pg_catalog.pg_has_role(proowner, 'USAGE') FROM pg_catalog.pg_proc"
        " WHERE oid = pg_catalog.to_regprocedure($1)",
        (f"{SCHEMA}.{WORD_MATCHES_SIGNATURE}",),
    )
    if may_replace is None:  # never made: nothing to fix
        return
    await db.execute((_WORD_MATCHES if may_replace else _DROP_WORD_MATCHES).format(schema=SCHEMA))
