"""The server schema's later steps (schema.py keeps the list): each changes what an earlier
step made, and says why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from navi_desktop.memory.pg.db import SCHEMA

if TYPE_CHECKING:
    from navi_desktop.memory.pg.db import PgDatabase


# Policies the planner can cost. A function in a policy is called for every row a statement
# reads (is_admin(), a pg_roles lookup, made counting 2,000 rows take 50 ms); as a scalar
# subquery it is an InitPlan, run once per statement. And a row estimate the policies cut to
# 8 of 2,000 made the planner join embeddings to memories by a nested loop over both (221 ms)
# instead of the HNSW index (6 ms): equality with a value, not coalesce() or IN (subplan),
# keeps the estimate. The policies mean the same as 0001's.
_ONCE_PER_STATEMENT = """
ALTER POLICY own ON {table}
    USING (user_id = ANY (ARRAY(SELECT id FROM users WHERE mine(owner_role))))
    WITH CHECK (user_id = ANY (ARRAY(SELECT id FROM users WHERE mine(owner_role))));
ALTER POLICY read_all ON {table} USING ((SELECT is_admin()));
ALTER POLICY one_profile ON {table}
    USING ((SELECT profile_id()) IS NULL OR user_id = (SELECT profile_id()))
    WITH CHECK ((SELECT profile_id()) IS NULL OR user_id = (SELECT profile_id()));
"""


async def m0003_policies_once_per_statement(db: PgDatabase) -> None:
    from navi_desktop.memory.pg.schema import USER_TABLES

    for table in USER_TABLES:
        await db.execute(_ONCE_PER_STATEMENT.format(table=table))


# Another daemon hears of what changed a memory, not of its use: each chat turn marks the
# memories it put into the prompt (last_used_at, strength back to 1), and that is no news
# to anyone. Decay's archiving changes the status, which is.
_NOTIFY_ON_CHANGE = """
DROP TRIGGER memories_changed ON memories;
CREATE TRIGGER memories_changed AFTER INSERT OR DELETE OR UPDATE OF
    kind, category, subject, key, value, evidence, source, confidence, status, pinned,
    superseded_by, review_reason, expires_at, valid_from, valid_to
    ON memories FOR EACH ROW EXECUTE FUNCTION notify_change();
"""


async def m0004_notify_on_change_not_use(db: PgDatabase) -> None:
    await db.execute(_NOTIFY_ON_CHANGE)


async def m0005_entity_links_by_entity(db: PgDatabase) -> None:
    # How often a name is linked (its weight in search): the unique indexes are partial (a
    # memory's links, a message's), so counting by entity alone scanned the table.
    await db.execute("CREATE INDEX entity_links_by_entity ON entity_links (entity_id)")


async def m0006_word_indexes_without_pending_list(db: PgDatabase) -> None:
    # A GIN index keeps new entries in a pending list that every search reads in full until
    # a vacuum merges it: after a copy of 10,000 memories, each word looked up cost ~2 ms
    # for nothing found. Memories and messages arrive a few at a time, so they go straight
    # into the index instead; what waits is merged now.
    for index in ("memories_tsv", "messages_tsv"):
        await db.execute(f"ALTER INDEX {index} SET (fastupdate = off)")
        await db.execute("SELECT gin_clean_pending_list($1::regclass)", (index,))


async def m0007_vectors_in_the_row(db: PgDatabase) -> None:
    # A 768-d vector (3 KB) was moved out of its row into TOAST storage, and reading it back
    # cost more than the distance itself (~11 µs a vector: 10,000 of one profile's measured
    # exactly took 150 ms). Stored in the row, as pgvector advises, and the rows written
    # before rewritten so (a value kept as it was keeps its old place; the text form of a
    # vector reads back exactly). Rows a non-superuser's policies hide stay where they are.
    # The HNSW indexes are dropped first, and built again when a store opens (vector_index):
    # updating 130,000 rows through them took 7 minutes, a build takes ~1 per 100,000.
    # Navi's own indexes only, their names quoted by the server: pg_indexes lists every
    # session's temporary indexes too, and a name a login chose for one (a quote, then
    # statements) was run as a statement of the tables' owner.
    await db.execute("ALTER TABLE embeddings ALTER COLUMN vector SET STORAGE PLAIN")
    for (name,) in await db.fetchall(
        "SELECT pg_catalog.format('%I.%I', schemaname, indexname) FROM pg_catalog.pg_indexes"
        " WHERE schemaname = $1 AND tablename = 'embeddings'"
        " AND indexname LIKE 'embeddings\\_hnsw\\_%'",
        (SCHEMA,),
    ):
        await db.execute(f"DROP INDEX {name}")
    await db.execute("UPDATE embeddings SET vector = vector::text::vector")


# Functions no caller can steer. A function's body is resolved when it runs, through the
# caller's search_path, where the session's temporary schema comes first for relations
# unless the path names it: any login's `CREATE TEMP TABLE pg_roles AS ...` made mine() and
# is_admin() say what it liked, and the policies then let it read and change every user's
# memory. Each function now runs with pg_catalog, then pg_temp last (never searched before
# it), and names every relation and function with its schema; the policies, the defaults
# and the trigger hold these functions by oid, so they stay as they are. Word search's
# functions, owned by a superuser, had the same hole, and a temporary view ran the
# caller's own code as that superuser (search_indexes.remake_word_matches).
_SEARCH_PATH_IMMUNE = """
CREATE OR REPLACE FUNCTION {schema}.profile_id() RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT nullif(pg_catalog.current_setting('navi.user_id', true), '')::pg_catalog.int8
$$;
CREATE OR REPLACE FUNCTION {schema}.mine(owner name) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                   WHERE r.rolname = owner AND pg_catalog.pg_has_role(r.oid, 'MEMBER'))
$$;
CREATE OR REPLACE FUNCTION {schema}.is_admin() RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                   WHERE r.rolname = 'navi_admin' AND pg_catalog.pg_has_role(r.oid, 'MEMBER'))
$$;
CREATE OR REPLACE FUNCTION {schema}.notify_change() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE r record;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    PERFORM pg_catalog.pg_notify('navi_changed',
                                 r.user_id::text || ' ' || TG_TABLE_NAME || ' ' || r.id::text);
    RETURN NULL;
END $$;
"""


async def m0008_functions_immune_to_search_path(db: PgDatabase) -> None:
    from navi_desktop.memory.pg.search_indexes import remake_word_matches

    await db.execute(_SEARCH_PATH_IMMUNE.format(schema=SCHEMA))
    await remake_word_matches(db)
