"""The memory store: one profile's SQLite file and every operation on it (async).

The operations live in small mixins, one idea each (facts, forgetting, search, exchange,
maintenance); this module holds opening, sessions, messages and the index bookkeeping they share.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np

from navi_desktop.errors import DiskFull, InvalidInput, NotFound
from navi_desktop.memory import hamming
from navi_desktop.memory.clock import check_iso, now_iso
from navi_desktop.memory.db import Database, DbError
from navi_desktop.memory.documents import memory_document, message_documents
from navi_desktop.memory.editing import EditOps
from navi_desktop.memory.embedders import Embedder
from navi_desktop.memory.entity_enrichment import EnrichmentOps
from navi_desktop.memory.entity_profiles import EntityOps
from navi_desktop.memory.exchange import ExchangeOps
from navi_desktop.memory.facts import FactOps
from navi_desktop.memory.failures import disk_full
from navi_desktop.memory.feedback import FeedbackOps
from navi_desktop.memory.forget import ForgetOps
from navi_desktop.memory.housekeeping import HousekeepingOps
from navi_desktop.memory.ledger import LedgerOps
from navi_desktop.memory.listing import ListingOps
from navi_desktop.memory.maintenance import EmbeddingPassOps, FadingOps, MaintenanceOps
from navi_desktop.memory.match_counts import MatchCounts
from navi_desktop.memory.migrations import check_current, check_schema, migrate
from navi_desktop.memory.models import Message
from navi_desktop.memory.search import SearchOps
from navi_desktop.memory.sessions import SessionAdminOps, SessionOps
from navi_desktop.memory.states import StateOps
from navi_desktop.memory.textproc import entity_names, normalize
from navi_desktop.memory.vectors import MEMORY, MESSAGE, BitIndex, int8_codes, sign_bits
from navi_desktop.paths import Paths, profile_of

ROLES = ("user", "assistant", "tool", "system")
LOAD_CHUNK = 250_000  # codes read at once when loading the bit index (24 MB at 768-d)


class MemoryStore(
    HousekeepingOps,
    FactOps,
    EditOps,
    StateOps,
    ForgetOps,
    SearchOps,
    SessionOps,
    SessionAdminOps,
    LedgerOps,
    FeedbackOps,
    EnrichmentOps,
    EntityOps,
    ExchangeOps,
    MaintenanceOps,
    FadingOps,
    EmbeddingPassOps,
    ListingOps,
):
    """Everything the daemon (or the CLI) does with one profile's memory."""

    # Where the code both backends run says things differently (the server's values:
    # pg/store.PgMemoryStore). A row read before it changes needs no lock: the file's writes
    # are one at a time. A memory without a key finds one with the same text through the
    # index on (kind, value COLLATE NOCASE). Names sort by code point.
    ROW_LOCK = ""
    SAME_VALUE = "value = ? COLLATE NOCASE"
    NAME_ORDER = "norm"

    def __init__(self, db: Database, embedder: Embedder | None = None) -> None:
        self.db = db
        self.embedder = embedder
        self._bits: BitIndex | None = None
        self._bits_version: int | None = None
        self._counts = {}
        self._match_counts = MatchCounts()

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        embedder: Embedder | None = None,
        create: bool = True,
        read_only: bool = False,
    ) -> MemoryStore:
        """Open (by default creating) a memory file and bring its schema up to date.

        A file that is damaged, foreign, unreadable or from a newer Navi raises a
        ``ProfileError`` naming the file and the fix, and is left untouched. ``read_only``:
        an existing file, to read without writing anything (a read-only disk); one that
        needs an upgrade is refused."""
        if read_only:
            db = await Database.open(path, check=check_current, read_only=True)
            return cls(db, embedder)
        db = await Database.open(path, create=create, check=check_schema)
        try:
            await migrate(db)
            await db.analyze()
            db.note_log_files()
        except BaseException as exc:
            await db.conn.close()
            if isinstance(exc, DiskFull):  # an upgrade that did not fit: nothing of it was kept
                raise disk_full(db.path, opening=True) from exc
            raise
        return cls(db, embedder)

    @classmethod
    async def open_profile(
        cls,
        profile: str,
        *,
        paths: Paths | None = None,
        embedder: Embedder | None = None,
        create: bool = True,
    ) -> MemoryStore:
        path = (paths or Paths.from_env()).profile_db(profile)
        return await cls.open(path, embedder=embedder, create=create)

    async def close(self) -> None:
        await self.db.close()

    async def __aenter__(self) -> MemoryStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def path(self) -> Path:
        return self.db.path

    @property
    def profile(self) -> str | None:
        """The profile's name, for commands shown to the user (None for a file elsewhere)."""
        return profile_of(self.path)

    async def _own_stats(self) -> dict[str, Any]:
        wal = self.path.with_name(self.path.name + "-wal")
        size = sum(p.stat().st_size for p in (self.path, wal) if p.exists())
        return {"path": str(self.path), "file_bytes": size}

    # -- metadata ---------------------------------------------------------------------------

    async def get_meta(self, key: str) -> str | None:
        async with self.db.reading():
            return await self.db.scalar("SELECT value FROM meta WHERE key = ?", (key,))

    async def _set_meta(self, key: str, value: str | None) -> None:
        if value is None:
            await self.db.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            await self.db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
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
        """The hot path: one transaction, no network, no model. Embedding happens later.
        ``said_at``: when the message was made, if before now (see ``_redacted_since``)."""
        if role not in ROLES:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        when = check_iso(at, "at") if at else now_iso()
        raw_meta = json.dumps(meta) if meta else None
        async with self.db.transaction():
            if said_at is not None:
                content, raw_meta = await self._redacted_since(said_at, content, meta, raw_meta)
            # Pipelined: each round trip to the SQLite thread is a good part of a save's time.
            steps = self.db.pipeline(
                self.db.execute(
                    "UPDATE sessions SET last_active_at = ?,"
                    " state = CASE state WHEN 'ended' THEN 'open' ELSE state END WHERE id = ?",
                    (when, session_id),
                ),
                self.db.fetchone(
                    "SELECT * FROM messages WHERE session_id = ? ORDER BY id DESC LIMIT 1",
                    (session_id,),
                ),
                self.db.fetchone(
                    "INSERT INTO messages (session_id, role, name, content, created_at, meta)"
                    " VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
                    (session_id, role, name, content, when, raw_meta),
                ),
            )
            try:
                _, previous, row = await steps
            except DbError:  # an unknown session fails the insert's foreign key: rolled back
                if not await self.db.scalar("SELECT 1 FROM sessions WHERE id = ?", (session_id,)):
                    raise NotFound(f"no session with id {session_id!r}") from None
                raise
            await self._index_message(row, previous)
        return Message.from_row(row)

    async def messages(
        self, session_id: str, *, after_id: int = 0, last: int | None = None
    ) -> list[Message]:
        """A session's messages in order: those after ``after_id``, or only the ``last`` N."""
        async with self.db.reading():
            rows = await self.db.fetchall(
                "SELECT * FROM (SELECT * FROM messages WHERE session_id = ? AND id > ?"
                " ORDER BY id DESC LIMIT ?) ORDER BY id",
                (session_id, after_id, -1 if last is None else last),
            )
        return [Message.from_row(r) for r in rows]

    # -- index bookkeeping (call inside a transaction) -----------------------------------------

    async def _index_message(self, row: Any, previous: Any | None) -> None:
        await self.db.pipeline(
            self.db.execute(
                "INSERT INTO messages_fts (rowid, body, context) VALUES (?, ?, ?)",
                (row["id"], *message_documents(row, previous)),
            ),
            self._link_entities("message_id", row["id"], entity_names(row["content"])),
        )

    async def _reindex_message(self, message_id: int) -> None:
        row = await self.db.fetchone("SELECT * FROM messages WHERE id = ?", (message_id,))
        previous = await self.db.fetchone(
            "SELECT * FROM messages WHERE session_id = ? AND id < ? ORDER BY id DESC LIMIT 1",
            (row["session_id"], message_id),
        )
        await self._unindex_messages([message_id])
        await self.db.execute("DELETE FROM entity_links WHERE message_id = ?", (message_id,))
        await self._index_message(row, previous)

    async def _unindex_messages(self, message_ids: list[int]) -> None:
        """Drop the messages' full-text rows and vectors: the contentless FTS rows and the
        in-memory bit index are not covered by ON DELETE CASCADE."""
        await self.db.executemany(
            "DELETE FROM messages_fts WHERE rowid = ?", [(mid,) for mid in message_ids]
        )
        await self._drop_embeddings("message_id", message_ids)
        self._match_counts.drop("messages_fts", "entity_links")  # their links go too

    async def _index_memory(self, row: Any) -> None:
        await self.db.execute(
            "INSERT INTO memories_fts (rowid, text, evidence) VALUES (?, ?, ?)",
            (row["id"], *memory_document(row)),
        )
        names = entity_names(row["value"])
        subject = normalize(row["subject"] or "")
        if subject and subject not in {"user", "i", "me", "the user"}:
            names.insert(0, subject)
        await self._link_entities("memory_id", row["id"], names)

    async def _unindex_memory(self, memory_id: int) -> None:
        await self.db.execute("DELETE FROM memories_fts WHERE rowid = ?", (memory_id,))
        await self.db.execute("DELETE FROM entity_links WHERE memory_id = ?", (memory_id,))
        await self._drop_embeddings("memory_id", [memory_id])
        # Counts kept by search go with the rows, even when new ones hide the shrink.
        self._match_counts.drop("memories_fts", "entity_links")

    def _links_moved(self) -> None:
        """Entity links changed owner (a merge) without the table shrinking."""
        self._match_counts.drop("entity_links")

    async def _link_entities(self, column: str, owner_id: int, names: list[str]) -> None:
        pairs = [(name, norm) for name in names if (norm := normalize(name))]
        if not pairs:
            return
        # Two statements whatever the count, pipelined: each round trip to the SQLite thread
        # costs time on the hot path. A name that is an entity's alias links to that entity.
        await self.db.pipeline(
            self.db.executemany(
                "INSERT INTO entities (name, norm) SELECT ?1, ?2 WHERE NOT EXISTS"
                " (SELECT 1 FROM entity_aliases WHERE norm = ?2) ON CONFLICT (norm) DO NOTHING",
                pairs,
            ),
            self.db.executemany(
                f"INSERT OR IGNORE INTO entity_links (entity_id, {column})"
                " SELECT coalesce((SELECT entity_id FROM entity_aliases WHERE norm = ?2),"
                " (SELECT id FROM entities WHERE norm = ?2)), ?1",
                [(owner_id, norm) for _, norm in pairs],
            ),
        )

    async def _drop_embeddings(self, column: str, owner_ids: list[int]) -> None:
        if not owner_ids:
            return
        marks = ",".join("?" * len(owner_ids))
        rows = await self.db.fetchall(
            f"SELECT id FROM embeddings WHERE {column} IN ({marks})", owner_ids
        )
        if rows:
            await self.db.execute(f"DELETE FROM embeddings WHERE {column} IN ({marks})", owner_ids)
            if self._bits is not None:
                self._bits.remove({r[0] for r in rows})

    async def _drop_orphan_entities(self) -> None:
        """Entities nothing mentions any more go, their aliases with them (cascade)."""
        # One lookup per partial link index: a plain ``entity_id = ?`` can use neither and
        # scanned every link per entity (44 s at 20k entities and 200k links; now 34 ms).
        await self.db.execute(
            "DELETE FROM entities WHERE NOT EXISTS (SELECT 1 FROM entity_links l"
            " WHERE l.entity_id = entities.id AND l.memory_id IS NOT NULL)"
            " AND NOT EXISTS (SELECT 1 FROM entity_links l"
            " WHERE l.entity_id = entities.id AND l.message_id IS NOT NULL)"
        )

    # -- embeddings --------------------------------------------------------------------------

    async def _store_vectors(
        self, column: str, owner_ids: list[int], hashes: list[str], vectors: np.ndarray
    ) -> None:
        assert self.embedder is not None
        if not owner_ids:
            return
        model, dim = self.embedder.model, int(vectors.shape[1])
        bits = sign_bits(vectors)
        stored = int8_codes(vectors)  # what the re-rank reads (vectors.py)
        index = await self._bit_index(dim)
        owner = MEMORY if column == "memory_id" else MESSAGE
        when = now_iso()
        # The vectors they had (their old texts', or of another size) go, from the index too
        # (which holds only this size's).
        replaced = await self.db.fetchall(
            f"DELETE FROM embeddings WHERE model = ? AND {column} IN"
            f" ({','.join('?' * len(owner_ids))}) RETURNING id, dim",
            (model, *owner_ids),
        )
        if index is not None:
            index.remove({r[0] for r in replaced if r[1] == index.dim})
        for owner_id, digest, vec, code in zip(owner_ids, hashes, stored, bits, strict=True):
            eid = await self.db.scalar(
                f"INSERT INTO embeddings ({column}, model, dim, content_hash, vector, bits,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (owner_id, model, dim, digest, vec.tobytes(), code.tobytes(), when),
            )
            if index is not None:
                index.add(eid, owner, code.tobytes())

    async def _bit_index(self, dim: int) -> BitIndex | None:
        """The in-memory coarse index of the current embedder's ``dim``-d vectors (the size
        the model gives now: its query's, or the vectors just made), loaded on first use.
        Vectors of another size are the embedding pass's to make again, not search's."""
        if self.embedder is None:
            return None
        # data_version moves only when another connection commits: then our copy may be stale.
        version = await self.db.scalar("PRAGMA data_version")
        if (
            self._bits is None
            or self._bits.model != self.embedder.model
            or self._bits.dim != dim
            or version != self._bits_version
        ):
            self._bits_version = version
            self._bits = await self._load_bit_index(self.embedder.model, dim)
        return self._bits

    async def _load_bit_index(self, model: str, dim: int) -> BitIndex:
        """``model``'s ``dim``-d codes from the file (_load_codes)."""
        index = BitIndex(model, dim)
        # An index large enough for the compiled scan gets it ready while its codes load
        # (importing numba and loading its compiled code, or compiling it: 0.5-3 s).
        highest = await self.db.scalar("SELECT max(id) FROM embeddings")
        large = (highest or 0) >= hamming.KERNEL_MIN
        warmed = asyncio.create_task(asyncio.to_thread(hamming.warm)) if large else None
        try:
            await self._load_codes(index)
        finally:  # not left running if loading failed
            if warmed is not None:
                await warmed
        return index

    async def _load_codes(self, index: BitIndex) -> None:
        """Each owner's codes a chunk at a time as two long values (the codes back to back,
        the ids joined with commas), not a Python row per code: rows made loading 1M codes
        take ~3 s. In a UTF-8 file, which Navi's are, group_concat keeps a blob's bytes as
        they are; extend_packed checks their length."""
        for owner, column in ((MEMORY, "memory_id"), (MESSAGE, "message_id")):
            last = 0
            while True:
                packed, ids, top = await self.db.fetchone(
                    "SELECT CAST(group_concat(bits, '') AS BLOB), group_concat(id), max(id)"
                    " FROM (SELECT id, bits FROM embeddings WHERE id > ? AND model = ? AND dim = ?"
                    f" AND {column} IS NOT NULL ORDER BY id LIMIT {LOAD_CHUNK})",
                    (last, index.model, index.dim),
                )
                if ids is None:
                    break
                if not index.extend_packed(ids, owner, packed):  # a damaged row's code
                    rows = await self.db.fetchall(
                        "SELECT id, bits FROM embeddings WHERE id > ? AND id <= ? AND model = ?"
                        f" AND dim = ? AND {column} IS NOT NULL",
                        (last, top, index.model, index.dim),
                    )
                    index.extend([r[0] for r in rows], [owner] * len(rows), [r[1] for r in rows])
                last = top
