"""The scrub behind forgetting, on the server: every copy of a value in every table (the
places and the decisions are scrub_plan.py's, the same as SQLite's), then VACUUM so the dead
rows' space is marked free. A forget records its scrub as pending (ids and times, never
text) with its other changes and clears that once the VACUUM ran; when it cannot run (the
tables belong to a role this login is not), it stays pending for ``retry_scrubs``."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import NaviError
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.documents import message_documents
from navi_desktop.memory.facts import MEMORY_COLUMNS
from navi_desktop.memory.matching import MARKER, Matcher
from navi_desktop.memory.models import Memory
from navi_desktop.memory.pg.db import SCHEMA
from navi_desktop.memory.scrub import PENDING_KEY, UNFINISHED, redact_memory
from navi_desktop.memory.scrub_plan import MEMORY_COLUMNS as SCRUBBED_COLUMNS
from navi_desktop.memory.scrub_plan import ScrubPlan
from navi_desktop.memory.sessions import MESSAGE_COLUMNS
from navi_desktop.memory.textproc import entity_names

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore

log = logging.getLogger(__name__)
VACUUMED = ("memories", "memory_history", "messages", "embeddings", "entity_links", "entities")
NOT_OWNER = (
    "the server's tables belong to a role this login is not: autovacuum frees the space in"
    " time, or their owner runs `navi memory forget ID --compact`"
)
_SUMMARY_KINDS = ("episode", "reflection")


def _candidates(
    matcher: Matcher, columns: tuple[str, ...], args: list[Any], *, json: bool = False
) -> str:
    """A WHERE clause that keeps every row the matcher could match in ``columns`` and skips
    most others on the server, so a large profile's rows do not all travel to Python (the
    SQLite side's rule, scrub.py): only for ASCII anchors; a row with other characters, or
    with any backslash in JSON (escapes), is kept for the full match. Its parameters are
    appended to ``args``."""
    if not matcher.anchors or not all(a.isascii() for a in matcher.anchors):
        return "true"
    anchors = list(dict.fromkeys(matcher.anchors))
    parts: list[str] = []
    for column in columns:
        text = f"coalesce({column}, '')"
        # Matching folds ASCII by lowering its letters: lower() in the C collation does just
        # that, whatever the database's locale. It reads a backtick as an apostrophe too.
        folded = f'lower({text} COLLATE "C")'
        if any("'" in a for a in anchors):
            folded = f"replace({folded}, '`', '''')"
        for anchor in anchors:
            args.append(anchor)
            parts.append(f"strpos({folded}, ${len(args)}) > 0")
        parts.append(f"octet_length({text}) <> char_length({text})")
        if json:
            args.append("\\")
            parts.append(f"strpos({text}, ${len(args)}) > 0")
    return "(" + " OR ".join(parts) + ")"


class PgScrubOps:
    # -- finding and applying ---------------------------------------------------------------------

    async def _plan_scrub(
        self: PgMemoryStore,
        matcher: Matcher,
        skip: set[int],
        same_values: set[str],
        *,
        samples: int = 0,
    ) -> ScrubPlan:
        """Every occurrence (inside a transaction or ``reading()``); see the SQLite side."""

        plan = ScrubPlan(matcher, samples)
        if not matcher:
            return plan
        args: list[Any] = []
        where = _candidates(matcher, ("content",), args)
        meta_where = _candidates(matcher, ("meta",), args, json=True)
        plan.add_messages(
            await self.db.fetchall(
                "SELECT id, session_id, role, content, meta FROM messages"
                f" WHERE {where} OR {meta_where} ORDER BY id",
                args,
            )
        )
        if plan.messages:  # the next message's index quotes a redacted one as context
            rows = await self.db.fetchall(
                "SELECT DISTINCT ON (m.id) n.id FROM messages m JOIN messages n"
                " ON n.session_id = m.session_id AND n.id > m.id"
                " WHERE m.id = ANY($1::bigint[]) ORDER BY m.id, n.id",
                (list(plan.messages),),
            )
            plan.following = {r["id"] for r in rows} - set(plan.messages)
        args = []
        where = _candidates(matcher, ("title", "pending_reason"), args)
        plan.add_sessions(
            await self.db.fetchall(
                f"SELECT id, title, pending_reason FROM sessions WHERE {where}", args
            )
        )
        args = []
        where = _candidates(matcher, SCRUBBED_COLUMNS, args)
        plan.add_memories(
            await self.db.fetchall(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {where} ORDER BY id", args
            ),
            skip,
            same_values,
        )
        args = []
        where = _candidates(matcher, ("old", "new"), args, json=True)
        plan.add_history(
            await self.db.fetchall(
                f"SELECT id, memory_id, old, new FROM memory_history WHERE {where} ORDER BY id",
                args,
            ),
            skip,
        )
        plan.add_meta(
            await self.db.fetchall(
                "SELECT key, value FROM meta WHERE key NOT IN ('tombstone_key', $1)", (PENDING_KEY,)
            )
        )
        plan.add_entities(
            await self.db.fetchall("SELECT id, name, norm FROM entities"),
            await self.db.fetchall("SELECT entity_id, name, norm FROM entity_aliases"),
        )
        args = []
        where = _candidates(matcher, ("note",), args)
        plan.add_notes(
            await self.db.fetchall(
                f"SELECT message_id, note FROM reply_feedback WHERE {where}", args
            )
        )
        return plan

    async def _apply_scrub(self: PgMemoryStore, plan: ScrubPlan) -> None:
        """Write a plan's changes and re-index what they touched (inside a transaction)."""
        await self.db.executemany(
            "UPDATE messages SET content = $1, meta = $2 WHERE id = $3",
            [(content, meta, mid) for mid, (content, meta) in plan.messages.items()],
        )
        redacted = list(plan.messages)
        await self.db.execute(
            "DELETE FROM embeddings WHERE message_id = ANY($1::bigint[])", (redacted,)
        )
        for mid in sorted({*plan.messages, *plan.following}):
            await self._reindex_message(mid, relink=mid in plan.messages)
        await self.db.executemany(
            "UPDATE sessions SET title = $1, pending_reason = $2 WHERE id = $3",
            [(title, reason, sid) for sid, (title, reason) in plan.sessions.items()],
        )
        for memory_id, changes in plan.memories.items():
            await redact_memory(self, memory_id, changes)
        await self.db.executemany(
            "UPDATE memory_history SET old = $1, new = $2 WHERE id = $3",
            [(old, new, hid) for hid, (old, new) in plan.history.items()],
        )
        for key, value in plan.meta.items():
            await self._set_meta(key, value)
        await self.db.execute("DELETE FROM entities WHERE id = ANY($1::bigint[])", (plan.entities,))
        await self.db.execute(
            "DELETE FROM entity_aliases WHERE norm = ANY($1::text[])", (plan.aliases,)
        )
        await self.db.executemany(
            "UPDATE reply_feedback SET note = $1 WHERE message_id = $2",
            [(note, mid) for mid, note in plan.notes.items()],
        )

    async def _reindex_message(self: PgMemoryStore, message_id: int, *, relink: bool) -> None:
        from navi_desktop.memory.pg.store import tsv_sql

        row = await self.db.fetchone(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = $1", (message_id,)
        )
        previous = await self.db.fetchone(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = $1 AND id < $2"
            " ORDER BY id DESC LIMIT 1",
            (row["session_id"], message_id),
        )
        body, context = message_documents(row, previous)
        await self.db.execute(
            f"UPDATE messages SET tsv = {tsv_sql(2)} WHERE id = $1", (message_id, body, context)
        )
        if relink:
            await self.db.execute("DELETE FROM entity_links WHERE message_id = $1", (message_id,))
            await self._link_entities("message_id", message_id, entity_names(row["content"]))

    # -- the server's free space -----------------------------------------------------------------

    async def _as_owner(
        self: PgMemoryStore, statements: list[str], tables: tuple[str, ...]
    ) -> bool:
        """Run maintenance statements (VACUUM, ANALYZE) as the login role, which may own the
        tables where the working role (navi_local, for a superuser login) does not; False,
        running nothing, when the login may not either (PostgreSQL would skip them silently
        with a warning). A connection of its own, closed after: a pooled one must never be
        left as a role that bypasses the profile's row-level security."""
        import asyncpg

        from navi_desktop.memory.pg.connect import explain

        try:
            conn = await asyncpg.connect(
                self.db.dsn,
                timeout=5.0,
                server_settings={"search_path": f"{SCHEMA}, public", "application_name": "navi"},
            )
        except Exception as exc:  # one line naming the server, as for the pool
            raise explain(exc, self.db.dsn) from exc
        try:
            may = await conn.fetchval(
                "SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
                " OR pg_has_role((SELECT datdba FROM pg_database"
                "  WHERE datname = current_database()), 'USAGE')"
                " OR bool_and(pg_has_role(c.relowner, 'USAGE'))"
                " FROM pg_class c WHERE c.oid = ANY($1::regclass[])",
                list(tables),
            )
            if not may:
                return False
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()
        return True

    async def vacuum(self: PgMemoryStore, *, full: bool = False) -> bool:
        """Mark the dead rows' space free (``full``: rewrite the tables, an admin's compact).
        VACUUM cannot run in a transaction: one statement per table. False when this login
        may not (see ``_as_owner``)."""
        verb = "VACUUM FULL" if full else "VACUUM"
        done = await self._as_owner([f"{verb} {t}" for t in VACUUMED], VACUUMED)
        if full and not done:
            raise NaviError(
                f"memory server {self.db.shown}: only the owner of Navi's tables may compact"
                " them: run the command again logged in as that role (or a superuser)"
            )
        return done

    async def _note_session_deleted(self: PgMemoryStore, session_id: str) -> None:
        """Inside a session's delete: its rows owe the tables' dead space a VACUUM."""
        await self._note_pending([], UNFINISHED)

    async def _session_deleted(self: PgMemoryStore, session_id: str) -> None:
        """After the delete: its rows out of the tables' dead space (or noted why not)."""
        await self._purge_free_space([])

    async def _note_pending(self: PgMemoryStore, ids: list[int], reason: str) -> None:
        """Record a scrub as unfinished (inside a transaction); ids and times, never text."""
        pending = [p for p in await self._pending() if p["ids"] != ids]
        pending.append({"ids": ids, "since": now_iso(), "reason": reason})
        await self._set_meta(PENDING_KEY, json.dumps(pending))

    async def _purge_free_space(self: PgMemoryStore, ids: list[int]) -> str | None:
        """VACUUM the touched tables; clears the pending record of ``ids`` once done, else
        records why it waits. Returns that reason, or None when done."""
        if not await self.vacuum():
            log.warning("forgotten text stays in the server's free space: %s", NOT_OWNER)
            async with self.db.transaction():
                await self._note_pending(ids, NOT_OWNER)
            return NOT_OWNER
        async with self.db.transaction():
            left = [p for p in await self._pending() if p["ids"] != ids]
            await self._set_meta(PENDING_KEY, json.dumps(left) if left else None)
        return None

    async def _pending(self: PgMemoryStore) -> list[dict[str, Any]]:
        raw = await self.db.scalar("SELECT value FROM meta WHERE key = $1", (PENDING_KEY,))
        return json.loads(raw) if raw else []

    async def pending_scrubs(self: PgMemoryStore) -> list[dict[str, Any]]:
        """Forgets whose rows may still be in the tables' dead space: ``ids``, ``since``,
        ``reason``."""
        async with self.db.reading():
            return await self._pending()

    async def retry_scrubs(self: PgMemoryStore, wait_ms: int = 250) -> list[dict[str, Any]]:
        """Try the pending scrubs again; returns the ones now complete. (``wait_ms`` is the
        SQLite side's wait for readers; VACUUM on a server does not wait for them.)"""
        before = await self.pending_scrubs()
        if not before or not await self.vacuum():
            return []
        async with self.db.transaction():
            # A forget that became pending after the VACUUM above stays pending.
            left = [p for p in await self._pending() if p not in before]
            await self._set_meta(PENDING_KEY, json.dumps(left) if left else None)
        return before

    # -- summaries rewritten after a redaction -----------------------------------------------------

    async def redacted_summaries(self: PgMemoryStore) -> list[Memory]:
        """Session summaries and reflections that still show where text was forgotten."""

        async with self.db.reading():
            rows = await self.db.fetchall(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE kind IN ('episode', 'reflection')"
                " AND strpos(value, $1) > 0 ORDER BY id",
                (MARKER,),
            )
        return [Memory.from_row(r) for r in rows]

    async def rewrite_summary(self: PgMemoryStore, memory_id: int, was: str, text: str) -> bool:
        """Replace a redacted summary by a rewritten one, unless it changed meanwhile."""

        async with self.db.transaction():
            row = await self.db.fetchone(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = $1 FOR UPDATE", (memory_id,)
            )
            if row is None or row["value"] != was or row["kind"] not in _SUMMARY_KINDS:
                return False
            await self.db.execute(
                "UPDATE memories SET value = $1, updated_at = $2 WHERE id = $3",
                (text, now_iso(), memory_id),
            )
            await self.db.execute("DELETE FROM embeddings WHERE memory_id = $1", (memory_id,))
            await self._index_memory(await self._row(memory_id))
            await self._history(
                memory_id, "rewrite", "forget", old={"value": was}, new={"value": text}
            )
        return True
