"""The memory server's schema: numbered steps applied once, in order, under an advisory lock
(two daemons opening the same new database do not race), and the row-level security that
keeps each user's memory to the roles that own it.

Every table carries ``user_id`` (a profile's row in ``users``) with ON DELETE CASCADE. A role
sees and changes only rows of users whose ``owner_role`` it is a member of; members of
``navi_admin`` may also read everyone's rows (the server design's ``read_all``). The policies
are FORCEd, so the role that created the tables is bound by them too; only a superuser
bypasses them, as PostgreSQL intends."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from navi_desktop.errors import NaviError
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.pg.connect import StorageUnavailable
from navi_desktop.memory.pg.db import SCHEMA, PgDatabase
from navi_desktop.memory.pg.refusals import NO_RIGHTS, sqlstate
from navi_desktop.memory.pg.schema_updates import (
    m0003_policies_once_per_statement,
    m0004_notify_on_change_not_use,
    m0005_entity_links_by_entity,
    m0006_word_indexes_without_pending_list,
    m0007_vectors_in_the_row,
    m0008_functions_immune_to_search_path,
)

MIGRATION_LOCK = 0x4E415649  # "NAVI": one migrator at a time per database

USER_TABLES = (
    "meta",
    "sessions",
    "messages",
    "memories",
    "memory_history",
    "tombstones",
    "forgotten_phrases",
    "embeddings",
    "entities",
    "entity_aliases",
    "entity_links",
    "entities_enriched",
    "injections",
    "reply_feedback",
)

_TABLES = """
CREATE FUNCTION profile_id() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT nullif(current_setting('navi.user_id', true), '')::bigint
$$;
CREATE TABLE users (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    profile    text NOT NULL,
    owner_role name NOT NULL DEFAULT current_user,
    created_at text NOT NULL,
    UNIQUE (owner_role, profile)
);
CREATE TABLE meta (
    user_id bigint NOT NULL DEFAULT profile_id() REFERENCES users ON DELETE CASCADE,
    key     text NOT NULL,
    value   text NOT NULL,
    PRIMARY KEY (user_id, key)
);
CREATE TABLE sessions (
    user_id         bigint NOT NULL DEFAULT profile_id() REFERENCES users ON DELETE CASCADE,
    id              text NOT NULL,
    title           text,
    created_at      text NOT NULL,
    last_active_at  text NOT NULL,
    state           text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'pending', 'ended')),
    processed_upto  bigint NOT NULL DEFAULT 0,
    pending_reason  text,
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at text,
    ended_at        text,
    PRIMARY KEY (user_id, id)
);
CREATE TABLE messages (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id    bigint NOT NULL DEFAULT profile_id() REFERENCES users ON DELETE CASCADE,
    session_id text NOT NULL,
    role       text NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
    name       text,
    content    text NOT NULL,
    created_at text NOT NULL,
    meta       text,
    tsv        tsvector,
    UNIQUE (user_id, id),
    FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, id) ON DELETE CASCADE
);
CREATE INDEX messages_by_session ON messages (user_id, session_id, id);
CREATE INDEX messages_tsv ON messages USING gin (tsv);
CREATE TABLE memories (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id          bigint NOT NULL DEFAULT profile_id() REFERENCES users ON DELETE CASCADE,
    kind             text NOT NULL CHECK (kind IN ('fact', 'episode', 'rule', 'reflection')),
    category         text,
    subject          text,
    key              text,
    norm_key         text,
    value            text NOT NULL,
    evidence         text,
    source           text NOT NULL CHECK (source IN
                     ('conversation', 'tool_call', 'user_explicit', 'auto_discovery', 'import')),
    confidence       double precision NOT NULL DEFAULT 1.0 CHECK (confidence BETWEEN 0 AND 1),
    session_id       text,
    message_from     bigint,
    message_to       bigint,
    status           text NOT NULL DEFAULT 'active'
                     CHECK (status IN ('active', 'held', 'archived', 'superseded')),
    pinned           integer NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1)),
    strength         double precision NOT NULL DEFAULT 1.0,
    mentions         integer NOT NULL DEFAULT 1,
    created_at       text NOT NULL,
    updated_at       text NOT NULL,
    last_used_at     text,
    valid_from       text NOT NULL,
    valid_to         text,
    superseded_by    bigint,
    review_reason    text,
    expires_at       text,
    last_verified_at text,
    tsv              tsvector,
    UNIQUE (user_id, id),
    FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, id)
        ON DELETE SET NULL (session_id),
    FOREIGN KEY (user_id, superseded_by) REFERENCES memories (user_id, id)
        ON DELETE SET NULL (superseded_by)
);
CREATE INDEX memories_by_kind ON memories (user_id, kind, status, category);
CREATE INDEX memories_by_key ON memories (user_id, norm_key) WHERE norm_key IS NOT NULL;
CREATE INDEX memories_by_session ON memories (user_id, session_id);
CREATE INDEX memories_superseded ON memories (superseded_by) WHERE superseded_by IS NOT NULL;
CREATE INDEX memories_unkeyed ON memories (user_id, kind, lower(value)) WHERE norm_key IS NULL;
CREATE INDEX memories_tsv ON memories USING gin (tsv);
CREATE TABLE memory_history (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id   bigint NOT NULL DEFAULT profile_id(),
    memory_id bigint NOT NULL,
    action    text NOT NULL,
    actor     text NOT NULL,
    at        text NOT NULL,
    old       text,
    new       text,
    FOREIGN KEY (user_id, memory_id) REFERENCES memories (user_id, id) ON DELETE CASCADE
);
CREATE INDEX memory_history_by_memory ON memory_history (memory_id, id);
CREATE TABLE tombstones (
    user_id    bigint NOT NULL DEFAULT profile_id() REFERENCES users ON DELETE CASCADE,
    fact_hash  text NOT NULL,
    value_hash text NOT NULL,
    kind       text NOT NULL,
    created_at text NOT NULL,
    PRIMARY KEY (user_id, fact_hash)
);
CREATE INDEX tombstones_by_value ON tombstones (user_id, value_hash);
CREATE TABLE forgotten_phrases (
    user_id    bigint NOT NULL DEFAULT profile_id() REFERENCES users ON DELETE CASCADE,
    hash       text NOT NULL,
    words      integer NOT NULL,
    created_at text NOT NULL,
    PRIMARY KEY (user_id, hash)
);
CREATE TABLE embeddings (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      bigint NOT NULL DEFAULT profile_id(),
    memory_id    bigint,
    message_id   bigint,
    model        text NOT NULL,
    dim          integer NOT NULL,
    content_hash text NOT NULL,
    vector       vector NOT NULL,
    created_at   text NOT NULL,
    CHECK ((memory_id IS NULL) != (message_id IS NULL)),
    FOREIGN KEY (user_id, memory_id) REFERENCES memories (user_id, id) ON DELETE CASCADE,
    FOREIGN KEY (user_id, message_id) REFERENCES messages (user_id, id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX embeddings_by_memory ON embeddings (memory_id, model)
    WHERE memory_id IS NOT NULL;
CREATE UNIQUE INDEX embeddings_by_message ON embeddings (message_id, model)
    WHERE message_id IS NOT NULL;
CREATE INDEX embeddings_by_model ON embeddings (user_id, model);
CREATE TABLE entities (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id bigint NOT NULL DEFAULT profile_id() REFERENCES users ON DELETE CASCADE,
    name    text NOT NULL,
    norm    text NOT NULL,
    type    text CHECK (type IN ('person', 'organisation', 'project', 'location', 'other')),
    UNIQUE (user_id, norm),
    UNIQUE (user_id, id)
);
CREATE TABLE entity_aliases (
    user_id   bigint NOT NULL DEFAULT profile_id(),
    entity_id bigint NOT NULL,
    name      text NOT NULL,
    norm      text NOT NULL,
    UNIQUE (user_id, norm),
    FOREIGN KEY (user_id, entity_id) REFERENCES entities (user_id, id) ON DELETE CASCADE
);
CREATE TABLE entity_links (
    user_id    bigint NOT NULL DEFAULT profile_id(),
    entity_id  bigint NOT NULL,
    memory_id  bigint,
    message_id bigint,
    CHECK ((memory_id IS NULL) != (message_id IS NULL)),
    FOREIGN KEY (user_id, entity_id) REFERENCES entities (user_id, id) ON DELETE CASCADE,
    FOREIGN KEY (user_id, memory_id) REFERENCES memories (user_id, id) ON DELETE CASCADE,
    FOREIGN KEY (user_id, message_id) REFERENCES messages (user_id, id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX entity_links_memory ON entity_links (entity_id, memory_id)
    WHERE memory_id IS NOT NULL;
CREATE UNIQUE INDEX entity_links_message ON entity_links (entity_id, message_id)
    WHERE message_id IS NOT NULL;
CREATE INDEX entity_links_by_memory ON entity_links (memory_id);
CREATE INDEX entity_links_by_message ON entity_links (message_id);
CREATE TABLE entities_enriched (
    user_id   bigint NOT NULL DEFAULT profile_id(),
    memory_id bigint PRIMARY KEY,
    model     text NOT NULL,
    at        text NOT NULL,
    FOREIGN KEY (user_id, memory_id) REFERENCES memories (user_id, id) ON DELETE CASCADE
);
CREATE TABLE injections (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id    bigint NOT NULL DEFAULT profile_id(),
    session_id text NOT NULL,
    message_id bigint,
    memory_id  bigint NOT NULL,
    rank       integer NOT NULL,
    score      double precision NOT NULL,
    signals    text NOT NULL,
    at         text NOT NULL,
    FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, id) ON DELETE CASCADE,
    FOREIGN KEY (user_id, message_id) REFERENCES messages (user_id, id) ON DELETE CASCADE,
    FOREIGN KEY (user_id, memory_id) REFERENCES memories (user_id, id) ON DELETE CASCADE
);
CREATE INDEX injections_by_message ON injections (message_id);
CREATE INDEX injections_by_memory ON injections (memory_id);
CREATE TABLE reply_feedback (
    user_id    bigint NOT NULL DEFAULT profile_id(),
    message_id bigint PRIMARY KEY,
    session_id text NOT NULL,
    turn_id    bigint,
    rating     integer NOT NULL CHECK (rating IN (-1, 1)),
    note       text,
    at         text NOT NULL,
    FOREIGN KEY (user_id, message_id) REFERENCES messages (user_id, id) ON DELETE CASCADE,
    FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, id) ON DELETE CASCADE,
    FOREIGN KEY (user_id, turn_id) REFERENCES messages (user_id, id) ON DELETE SET NULL (turn_id)
);
"""

# Membership is checked through pg_roles by oid: pg_has_role() on a role name that no longer
# exists raises an error, and one dropped role must not break every query.
_SECURITY = """
CREATE FUNCTION mine(owner name) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pg_roles r
                   WHERE r.rolname = owner AND pg_has_role(r.oid, 'MEMBER'))
$$;
CREATE FUNCTION is_admin() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pg_roles r
                   WHERE r.rolname = 'navi_admin' AND pg_has_role(r.oid, 'MEMBER'))
$$;
ALTER TABLE users ENABLE ROW LEVEL SECURITY;
ALTER TABLE users FORCE ROW LEVEL SECURITY;
CREATE POLICY own ON users USING (mine(owner_role)) WITH CHECK (mine(owner_role));
CREATE POLICY read_all ON users FOR SELECT USING (is_admin());
GRANT USAGE ON SCHEMA {schema} TO PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO PUBLIC;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO PUBLIC;
"""

_TABLE_POLICY = """
ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
ALTER TABLE {table} FORCE ROW LEVEL SECURITY;
CREATE POLICY own ON {table}
    USING (user_id IN (SELECT id FROM users WHERE mine(owner_role)))
    WITH CHECK (user_id IN (SELECT id FROM users WHERE mine(owner_role)));
CREATE POLICY read_all ON {table} FOR SELECT USING (is_admin());
CREATE POLICY one_profile ON {table} AS RESTRICTIVE
    USING (user_id = coalesce(profile_id(), user_id))
    WITH CHECK (user_id = coalesce(profile_id(), user_id));
"""

# Another daemon on the same user learns of a change from this (feeds memory.changed). The
# payload is ids only: a channel can be listened to by any role, so it never carries text.
_NOTIFY = """
CREATE FUNCTION notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    PERFORM pg_notify('navi_changed',
                      r.user_id::text || ' ' || TG_TABLE_NAME || ' ' || r.id::text);
    RETURN NULL;
END $$;
CREATE TRIGGER memories_changed AFTER INSERT OR UPDATE OR DELETE ON memories
    FOR EACH ROW EXECUTE FUNCTION notify_change();
"""


async def _m0001_tables(db: PgDatabase) -> None:
    await db.execute(_TABLES)
    await db.execute(_SECURITY.format(schema=SCHEMA))
    for table in USER_TABLES:
        await db.execute(_TABLE_POLICY.format(table=table))
    await db.execute(_NOTIFY)


async def _m0002_admin_role(db: PgDatabase) -> None:
    """The read-all role, when the migrating role may create roles (else an administrator
    creates it: ``CREATE ROLE navi_admin NOLOGIN``; until then nobody reads all)."""
    may = await db.scalar(
        "SELECT rolcreaterole OR rolsuper FROM pg_roles WHERE rolname = current_user"
    )
    exists = await db.scalar("SELECT 1 FROM pg_roles WHERE rolname = 'navi_admin'")
    if may and not exists:
        await db.execute("CREATE ROLE navi_admin NOLOGIN")


Step = Callable[[PgDatabase], Coroutine[Any, Any, None]]
MIGRATIONS: list[tuple[str, Step]] = [
    ("0001_tables", _m0001_tables),
    ("0002_admin_role", _m0002_admin_role),
    ("0003_policies_once_per_statement", m0003_policies_once_per_statement),
    ("0004_notify_on_change_not_use", m0004_notify_on_change_not_use),
    ("0005_entity_links_by_entity", m0005_entity_links_by_entity),
    ("0006_word_indexes_without_pending_list", m0006_word_indexes_without_pending_list),
    ("0007_vectors_in_the_row", m0007_vectors_in_the_row),
    ("0008_functions_immune_to_search_path", m0008_functions_immune_to_search_path),
]


async def ensure_extension(db: PgDatabase) -> None:
    """pgvector, created on first use; a role that may not create it gets the fix named."""
    async with db.reading():
        if await db.scalar("SELECT 1 FROM pg_extension WHERE extname = 'vector'"):
            return
        available = await db.scalar("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    if not available:
        raise StorageUnavailable(
            f"memory server {db.shown} has no pgvector extension: install it on the server"
            " (package postgresql-16-pgvector, or use pgserver, which bundles it)"
        )

    try:
        async with db.transaction():
            await db.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except Exception as exc:  # the driver's error, or the line db.py made of it
        if sqlstate(exc) != NO_RIGHTS:
            raise
        raise StorageUnavailable(
            f"memory server {db.shown}: this role may not create the pgvector extension: run"
            " `CREATE EXTENSION vector;` once as a superuser or the database owner"
        ) from exc
    await db.reset_codecs()


async def has_trigram(db: PgDatabase) -> bool:
    async with db.reading():
        return bool(await db.scalar("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'"))


async def migrate(db: PgDatabase) -> list[str]:
    """Apply the steps not yet applied, in one transaction; returns their names."""

    await ensure_extension(db)
    applied: list[str] = []
    pending: list[str] = []  # an update of tables that exist: only their owner may apply it
    try:
        async with db.transaction():
            await db.scalar("SELECT pg_advisory_xact_lock($1)", (MIGRATION_LOCK,))
            # Only what is missing is created: a daemon's role may use an existing schema
            # without the right to create one.
            made = await db.scalar("SELECT to_regclass($1)", (f"{SCHEMA}.schema_migrations",))
            if not made:
                await db.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
                await db.execute(
                    "CREATE TABLE schema_migrations"
                    " (name text PRIMARY KEY, applied_at text NOT NULL)"
                )
                await db.execute("GRANT SELECT ON schema_migrations TO PUBLIC")
            done = {r[0] for r in await db.fetchall("SELECT name FROM schema_migrations")}
            known = {name for name, _ in MIGRATIONS}
            if done - known:
                raise NaviError(
                    f"memory server {db.shown} has a newer Navi schema"
                    f" ({', '.join(sorted(done - known))}): upgrade Navi on this machine"
                )
            if made and "0001_tables" in done:
                pending = [name for name, _ in MIGRATIONS if name not in done]
            for name, step in MIGRATIONS:
                if name in done:
                    continue
                await step(db)
                await db.execute(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES ($1, $2)",
                    (name, now_iso()),
                )
                applied.append(name)
    except Exception as exc:
        if sqlstate(exc) != NO_RIGHTS:
            raise
        if pending:
            raise await _update_refused(db, pending) from exc
        raise StorageUnavailable(
            f"memory server {db.shown}: this role may not create Navi's tables ({exc}): let an"
            " administrator open it once with a role that may (CREATE on the database), or"
            f" GRANT CREATE ON DATABASE to this role"
        ) from exc
    return applied


async def _update_refused(db: PgDatabase, pending: list[str]) -> StorageUnavailable:
    """A login that does not own Navi's tables cannot apply an update to them (some close a
    hole on the server), and works on none until it is applied: the line names who may."""
    async with db.reading():
        owner = await db.scalar(
            "SELECT pg_catalog.pg_get_userbyid(relowner) FROM pg_catalog.pg_class"
            " WHERE oid = pg_catalog.to_regclass($1)",
            (f"{SCHEMA}.users",),
        )
    return StorageUnavailable(
        f"memory server {db.shown} has a schema update this login may not apply"
        f" ({', '.join(pending)}): only the owner of Navi's tables (role {owner}) or a"
        " superuser may: run any `navi memory` command once logged in as that role; until"
        " then Navi does not use the server from this login"
    )
