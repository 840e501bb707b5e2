"""One profile's memory on a PostgreSQL server: the same engine API as ``MemoryStore``.

A profile is a row of ``users``; every connection of this store's pool has ``navi.user_id``
set to it, so statements are scoped to the profile without naming it (the ``one_profile``
policy, and each table's ``user_id`` default). Who may read or change which profile is the
server's row-level security, not this code (schema.py)."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.memory.clock import check_iso, now_iso
from navi_desktop.memory.documents import memory_document, message_documents
from navi_desktop.memory.editing import EditOps
from navi_desktop.memory.embedders import Embedder
from navi_desktop.memory.entity_enrichment import EnrichmentOps
from navi_desktop.memory.entity_profiles import EntityOps
from navi_desktop.memory.exchange import ExchangeOps
from navi_desktop.memory.facts import FactOps
from navi_desktop.memory.feedback import FeedbackOps
from navi_desktop.memory.listing import ListingOps
from navi_desktop.memory.maintenance import EmbeddingPassOps, FadingOps
from navi_desktop.memory.models import Message
from navi_desktop.memory.pg.db import BASE_SETTINGS, CLOSE_S, PgDatabase
from navi_desktop.memory.pg.entities import PgEntityOps
from navi_desktop.memory.pg.forget import FORGET_LOCK, PgForgetOps, ProfileDatabase
from navi_desktop.memory.pg.free_space import PgFreeSpaceOps
from navi_desktop.memory.pg.housekeeping import PgHousekeepingOps
from navi_desktop.memory.pg.ledger import PgLedgerOps
from navi_desktop.memory.pg.maintenance import PgMaintenanceOps
from navi_desktop.memory.pg.schema import migrate
from navi_desktop.memory.pg.scrub import PgScrubOps
from navi_desktop.memory.pg.search import PgSearchOps
from navi_desktop.memory.pg.search_indexes import trigram_indexes, vector_index, word_matches
from navi_desktop.memory.sessions import MESSAGE_COLUMNS, SessionAdminOps, SessionOps
from navi_desktop.memory.states import StateOps
from navi_desktop.memory.textproc import entity_names, normalize

ROLES = ("user", "assistant", "tool", "system")
TS_CONFIG = "english"  # stemming like the SQLite side's porter tokenizer


def tsv_sql(first: int) -> str:
    """A tsvector from two documents ($first, $first+1): the text weighs A, its context B."""
    return (
        f"setweight(to_tsvector('{TS_CONFIG}', ${first}), 'A')"
        f" || setweight(to_tsvector('{TS_CONFIG}', ${first + 1}), 'B')"
    )


class PgMemoryStore(
    PgHousekeepingOps,
    PgEntityOps,
    PgForgetOps,
    PgFreeSpaceOps,
    PgLedgerOps,
    PgMaintenanceOps,
    PgScrubOps,
    PgSearchOps,
    FactOps,
    StateOps,
    EditOps,
    FeedbackOps,
    SessionOps,
    SessionAdminOps,
    ListingOps,
    ExchangeOps,
    EntityOps,
    EnrichmentOps,
    FadingOps,
    EmbeddingPassOps,
):
    """Everything the daemon (or the CLI) does with one profile's memory, on a server."""

    backend = "postgres"
    shares_vectors = True  # machines share a profile: another size may be another's model
    # Where the shared code's SQL differs (the file's values: store.MemoryStore).
    ROW_LOCK = " FOR UPDATE"  # two daemons may change one profile at once
    SAME_VALUE = "lower(value) = lower(?)"  # memories_unkeyed indexes lower(value)
    NAME_ORDER = 'norm COLLATE "C"'  # code point order, whatever the server's collation

    def __init__(
        self, db: ProfileDatabase, user_id: int, profile: str, embedder: Embedder | None
    ) -> None:
        self.db = db
        self.user_id = user_id
        self.profile = profile
        self.embedder = embedder
        self.indexed_words = False  # word search through word_matches() (search_indexes.py)

    @classmethod
    async def open(
        cls,
        dsn: str,
        profile: str,
        *,
        embedder: Embedder | None = None,
        owner: str | None = None,
        create: bool = True,
    ) -> PgMemoryStore:
        """Connect, bring the schema up to date, and find (by default create) the profile's
        user row, owned by ``owner`` (a role this login is a member of; default: the login)."""
        setup = await PgDatabase.connect(dsn, max_size=1, query_s=None)  # see QUERY_S
        try:
            await migrate(setup)
            settings = await _working_role(setup)
            async with setup.reading():  # as the owner: indexes for the vectors already kept
                for (dim,) in await setup.fetchall("SELECT DISTINCT dim FROM embeddings"):
                    await vector_index(setup, dim)
                await trigram_indexes(setup)
                indexed_words = await word_matches(setup)
            owner = owner or settings.get("role")
            user_id = await _profile_row(setup, profile, owner, create)
        finally:
            await setup.close()
        settings["navi.user_id"] = str(user_id)
        db = await ProfileDatabase.connect(dsn, settings=settings)
        db.lock_key = FORGET_LOCK + user_id
        store = cls(db, user_id, profile, embedder)
        store.indexed_words = indexed_words
        return store

    async def close(self) -> None:
        await self.db.close()

    async def __aenter__(self) -> PgMemoryStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def where(self) -> str:
        """Where this memory lives, for messages (password hidden)."""
        return f"{self.db.shown} (profile {self.profile})"

    async def _own_stats(self) -> dict[str, Any]:
        async with self.db.reading():
            trigram = await self.db.scalar("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")
        return {
            "path": self.where,
            "backend": "postgres",
            "substring_search": "pg_trgm" if trigram else "ILIKE (pg_trgm not installed)",
        }

    # -- metadata ---------------------------------------------------------------------------

    async def get_meta(self, key: str) -> str | None:
        async with self.db.reading():
            return await self.db.scalar("SELECT value FROM meta WHERE key = $1", (key,))

    async def _set_meta(self, key: str, value: str | None) -> None:
        if value is None:
            await self.db.execute("DELETE FROM meta WHERE key = $1", (key,))
        else:
            await self.db.execute(
                "INSERT INTO meta (key, value) VALUES ($1, $2)"
                " ON CONFLICT (user_id, key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    async def set_meta(self, key: str, value: str | None) -> None:
        async with self.db.transaction():
            await self._set_meta(key, value)

    # -- sessions and messages ----------------------------------------------------------------

    async def save_message(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        name: str | None = None,
        at: str | None = None,
        meta: dict[str, Any] | None = None,
        said_at: str | None = None,
    ) -> Message:
        """The hot path: one transaction, no model. Embedding happens later. ``said_at``: when
        the message was made, if before now (see ``_redacted_since``)."""
        if role not in ROLES:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        when = check_iso(at, "at") if at else now_iso()
        raw_meta = json.dumps(meta) if meta else None
        async with self.db.transaction():
            if said_at is not None:
                content, raw_meta = await self._redacted_since(said_at, content, meta, raw_meta)
            touched = await self.db.execute(
                "UPDATE sessions SET last_active_at = $1,"
                " state = CASE state WHEN 'ended' THEN 'open' ELSE state END WHERE id = $2",
                (when, session_id),
            )
            if not touched:
                raise NotFound(f"no session with id {session_id!r}")
            previous = await self.db.fetchone(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = $1"
                " ORDER BY id DESC LIMIT 1",
                (session_id,),
            )
            draft = {"name": name, "role": role, "content": content, "created_at": when}
            body, context = message_documents(draft, previous)
            row = await self.db.fetchone(
                "INSERT INTO messages (session_id, role, name, content, created_at, meta, tsv)"
                f" VALUES ($1, $2, $3, $4, $5, $6, {tsv_sql(7)}) RETURNING {MESSAGE_COLUMNS}",
                (
                    session_id,
                    role,
                    name,
                    content,
                    when,
                    raw_meta,
                    body,
                    context,
                ),
            )
            await self._link_entities("message_id", row["id"], entity_names(content))
        return Message.from_row(row)

    async def messages(
        self, session_id: str, *, after_id: int = 0, last: int | None = None
    ) -> list[Message]:
        """A session's messages in order: those after ``after_id``, or only the ``last`` N."""
        async with self.db.reading():
            rows = await self.db.fetchall(
                f"SELECT * FROM (SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = $1"
                " AND id > $2 ORDER BY id DESC LIMIT $3) m ORDER BY id",
                (session_id, after_id, last),
            )
        return [Message.from_row(r) for r in rows]

    # -- index bookkeeping (inside a transaction) ----------------------------------------------

    async def _index_memory(self, row: Any) -> None:
        text, evidence = memory_document(row)
        await self.db.execute(
            f"UPDATE memories SET tsv = {tsv_sql(2)} WHERE id = $1", (row["id"], text, evidence)
        )
        names = entity_names(row["value"])
        subject = normalize(row["subject"] or "")
        if subject and subject not in {"user", "i", "me", "the user"}:
            names.insert(0, subject)
        await self.db.execute("DELETE FROM entity_links WHERE memory_id = $1", (row["id"],))
        await self._link_entities("memory_id", row["id"], names)

    async def _unindex_memory(self, memory_id: int) -> None:
        # The words and the links are rewritten by _index_memory; the vectors wait for the
        # next embedding pass.
        await self.db.execute("DELETE FROM embeddings WHERE memory_id = ?", (memory_id,))

    async def _unindex_messages(self, message_ids: list[int]) -> None:
        """Nothing beside the rows: a message's words are in its row, and its vectors, links
        and ledger rows go with it (ON DELETE CASCADE)."""

    def _links_moved(self) -> None:
        """Nothing to drop: the server's search keeps no counts between searches."""

    async def _link_entities(self, column: str, owner_id: int, names: list[str]) -> None:
        pairs = [(name, norm) for name in names if (norm := normalize(name))]
        if not pairs:
            return
        # A name that is an entity's alias links to that entity.
        await self.db.execute(
            "INSERT INTO entities (name, norm) SELECT n, m FROM unnest($1::text[], $2::text[])"
            " AS t(n, m) WHERE NOT EXISTS (SELECT 1 FROM entity_aliases a WHERE a.norm = t.m)"
            " ON CONFLICT DO NOTHING",
            ([p[0] for p in pairs], [p[1] for p in pairs]),
        )
        await self.db.execute(
            f"INSERT INTO entity_links (entity_id, {column}) SELECT DISTINCT"
            " coalesce((SELECT entity_id FROM entity_aliases a WHERE a.norm = t.m),"
            " (SELECT id FROM entities e WHERE e.norm = t.m)), $2::bigint"
            " FROM unnest($1::text[]) AS t(m) ON CONFLICT DO NOTHING",
            ([p[1] for p in pairs], owner_id),
        )

    async def _drop_orphan_entities(self) -> None:
        await self.db.execute(
            "DELETE FROM entities e WHERE NOT EXISTS"
            " (SELECT 1 FROM entity_links l WHERE l.entity_id = e.id)"
        )


LOCAL_ROLE = "navi_local"


async def _working_role(db: PgDatabase) -> dict[str, str]:
    """A superuser (pgserver's default login) bypasses row-level security, and with it the
    scoping to one profile: such a login works as ``navi_local``, a plain role, instead."""
    async with db.transaction():
        bypass = await db.scalar(
            "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
        )
        if not bypass:
            return {}
        await db.execute(
            f"DO $$ BEGIN CREATE ROLE {LOCAL_ROLE} NOLOGIN;"
            " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
    return {"role": LOCAL_ROLE}


async def _profile_row(db: PgDatabase, profile: str, owner: str | None, create: bool) -> int:
    async with db.transaction():
        owner = owner or await db.scalar("SELECT current_user")
        found = await db.scalar(
            "SELECT id FROM users WHERE owner_role = $1 AND profile = $2", (owner, profile)
        )
        if found is None and create:
            found = await db.scalar(
                "INSERT INTO users (profile, owner_role, created_at) VALUES ($1, $2, $3)"
                " ON CONFLICT (owner_role, profile) DO UPDATE SET profile = excluded.profile"
                " RETURNING id",
                (profile, owner, now_iso()),
            )
            await db.execute(
                "INSERT INTO meta (user_id, key, value) VALUES ($1, 'created_at', $2),"
                " ($1, 'tombstone_key', $3) ON CONFLICT DO NOTHING",
                (found, now_iso(), secrets.token_hex(32)),
            )
        if found is None:
            raise NotFound(f"no profile {profile!r} of role {owner!r} on {db.shown}")
        return int(found)


class ChangeFeed:
    """Changes to this profile's memories made by any daemon on the server (LISTEN/NOTIFY):
    ``callback(memory_id)`` for each, on a connection of its own."""

    def __init__(self, conn: Any, user_id: int, callback: Any) -> None:
        self.conn, self.user_id, self.callback = conn, user_id, callback

    def _heard(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        user, _table, memory_id = payload.split(" ")
        if int(user) == self.user_id:
            self.callback(int(memory_id))

    async def close(self) -> None:
        try:
            async with asyncio.timeout(CLOSE_S):  # a frozen server is not waited for (pg/db.py)
                await self.conn.remove_listener("navi_changed", self._heard)
                await self.conn.close()
        except TimeoutError:
            self.conn.terminate()


async def watch_changes(store: PgMemoryStore, callback: Any) -> ChangeFeed:
    conn = await store.db.connect_alone(BASE_SETTINGS, None)  # it only listens
    feed = ChangeFeed(conn, store.user_id, callback)
    await conn.add_listener("navi_changed", feed._heard)
    return feed
