"""The scrub behind forgetting, on the server: every copy of a value in every table (the
places and the decisions are scrub_plan.py's, the same as SQLite's). The VACUUM after it,
and what waits for one, are free_space.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.documents import message_documents
from navi_desktop.memory.facts import MEMORY_COLUMNS
from navi_desktop.memory.matching import MARKER, Matcher
from navi_desktop.memory.models import Memory
from navi_desktop.memory.scrub import PENDING_KEY, redact_memory
from navi_desktop.memory.scrub_plan import MEMORY_COLUMNS as SCRUBBED_COLUMNS
from navi_desktop.memory.scrub_plan import ScrubPlan
from navi_desktop.memory.sessions import MESSAGE_COLUMNS
from navi_desktop.memory.textproc import entity_names

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore

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
