"""The scrub behind forgetting: every copy of a value in every table, then in the file's bytes.

``_plan_scrub`` finds, for a ``Matcher`` (matching.py), every place the value occurs: messages
(text and metadata such as tool-call arguments), session titles and retry reasons, other
memories (summaries, reflections, facts, rules), history rows, the profile summary and other
metadata, and entities. ``_apply_scrub`` redacts them in place and re-indexes what changed.
``_purge_free_space`` then merges the full-text indexes, refreshes planner samples that could
hold old index keys, and folds the write-ahead log into the file. A forget records its scrub
as pending (ids and times only, never text) with its other changes and clears that once done;
when another program holds the file open for reading, or the disk is full, it stays pending
and is retried until it can finish (``retry_scrubs``).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import DiskError, DiskFull
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.matching import MARKER, Matcher
from navi_desktop.memory.models import Memory
from navi_desktop.memory.scrub_plan import MEMORY_COLUMNS as _MEMORY_COLUMNS
from navi_desktop.memory.scrub_plan import ScrubCounts, ScrubPlan
from navi_desktop.memory.textproc import normalize_key

if TYPE_CHECKING:
    from navi_desktop.memory.backends import Store
    from navi_desktop.memory.store import MemoryStore

log = logging.getLogger(__name__)
__all__ = ["ScrubCounts", "ScrubOps", "ScrubPlan"]
PENDING_KEY = "pending_scrubs"
BUSY_MS = 5000  # the connection's usual wait for a lock (db.py)
FORGET_WAIT_MS = 2000  # how long a forget waits for readers before it leaves the scrub pending
RETRY_WAIT_MS = 250  # each later attempt: short, it holds the store's lock meanwhile
# Who reads cannot be told from here: a long import or search of Navi's own holds old pages
# as another program would (one that said "another program" sent users looking for one).
WAITING = (
    "the memory file is being read, by Navi itself (an import, a search) or another program"
    " (a backup, a database browser?)"
)
UNFINISHED = "it did not finish (a full disk, or Navi stopped)"
DISK_FULL = "the disk is full: free some space"
DISK_ERROR = "the disk reported an error: check it (free space, `dmesg`)"
_SUMMARY_KINDS = ("episode", "reflection")


def _candidates(matcher: Matcher, columns: tuple[str, ...], *, json: bool = False):
    """A WHERE clause that keeps every row the matcher could match in ``columns`` and skips
    most others in SQLite, so a large profile's rows do not all travel to Python. Only for
    ASCII anchors (SQLite's lower() folds ASCII only): any row with other characters, or
    with JSON escapes (any backslash: ``\\"`` and ``\\\\`` as well as ``\\u``), is kept
    for the full match, as ``Matcher.redact_json`` does."""
    if not matcher.anchors or not all(a.isascii() for a in matcher.anchors):
        return "1", []
    parts: list[str] = []
    params: list[Any] = []
    anchors = list(dict.fromkeys(matcher.anchors))
    for column in columns:
        text = f"coalesce({column}, '')"
        folded = f"lower({text})"
        if any("'" in a for a in anchors):  # matching reads a backtick as an apostrophe
            folded = f"replace({folded}, '`', '''')"
        parts += [f"instr({folded}, ?) > 0" for _ in anchors]
        params += anchors
        # Not ASCII: more bytes than characters (far faster than a GLOB character class).
        parts.append(f"length(CAST({text} AS BLOB)) != length({text})")
        if json:
            parts.append(f"instr({text}, '\\') > 0")
    return "(" + " OR ".join(parts) + ")", params


async def redact_memory(store: Store, memory_id: int, changes: dict[str, Any]) -> None:
    """Write a scrub's changes to one memory and index it again, on either backend (inside a
    transaction). Its history names only the places, never the text that went."""
    row = await store._row(memory_id)
    merged = {c: row[c] for c in _MEMORY_COLUMNS} | changes
    norm_key = normalize_key(merged["subject"], merged["key"]) if merged["key"] else None
    texts = ", ".join(f"{c} = ?" for c in _MEMORY_COLUMNS)
    await store.db.execute(
        f"UPDATE memories SET {texts}, norm_key = ?, updated_at = ? WHERE id = ?",
        (*(merged[c] for c in _MEMORY_COLUMNS), norm_key, now_iso(), memory_id),
    )
    await store._unindex_memory(memory_id)
    await store._index_memory(await store._row(memory_id))
    await store._history(memory_id, "redact", "forget", new={"redacted": sorted(changes)})


class ScrubOps:
    async def _plan_scrub(
        self: MemoryStore,
        matcher: Matcher,
        skip: set[int],
        same_values: set[str],
        *,
        samples: int = 0,
    ) -> ScrubPlan:
        """Find every occurrence (call inside a transaction or ``reading()``). ``skip``: the
        memories being forgotten (they go whole); ``same_values``: normalised values whose
        other memories are forgotten with them rather than redacted (scrub_plan.py decides)."""
        plan = ScrubPlan(matcher, samples)
        if not matcher:
            return plan
        await self._plan_messages(matcher, plan)
        where, params = _candidates(matcher, ("title", "pending_reason"))
        plan.add_sessions(
            await self.db.fetchall(
                f"SELECT id, title, pending_reason FROM sessions WHERE {where}", params
            )
        )
        where, params = _candidates(matcher, _MEMORY_COLUMNS)
        plan.add_memories(
            await self.db.fetchall(f"SELECT * FROM memories WHERE {where}", params),
            skip,
            same_values,
        )
        where, params = _candidates(matcher, ("old", "new"), json=True)
        plan.add_history(
            await self.db.fetchall(
                f"SELECT id, memory_id, old, new FROM memory_history WHERE {where}", params
            ),
            skip,
        )
        plan.add_meta(
            await self.db.fetchall(
                "SELECT key, value FROM meta WHERE key NOT IN ('tombstone_key', ?)",
                (PENDING_KEY,),
            )
        )
        plan.add_entities(
            await self.db.fetchall("SELECT id, name, norm FROM entities"),
            await self.db.fetchall("SELECT entity_id, name, norm FROM entity_aliases"),
        )
        where, params = _candidates(matcher, ("note",))
        plan.add_notes(
            await self.db.fetchall(
                f"SELECT message_id, note FROM reply_feedback WHERE {where}", params
            )
        )
        return plan

    async def _plan_messages(self: MemoryStore, matcher: Matcher, plan: ScrubPlan) -> None:
        where, params = _candidates(matcher, ("content",))
        meta_where, meta_params = _candidates(matcher, ("meta",), json=True)
        plan.add_messages(
            await self.db.fetchall(
                "SELECT id, session_id, role, content, meta FROM messages"
                f" WHERE {where} OR {meta_where} ORDER BY id",
                [*params, *meta_params],
            )
        )
        for mid in plan.messages:  # the next message's index quotes this one as context
            following = await self.db.scalar(
                "SELECT id FROM messages WHERE session_id = (SELECT session_id FROM messages"
                " WHERE id = ?) AND id > ? ORDER BY id LIMIT 1",
                (mid, mid),
            )
            if following is not None:
                plan.following.add(following)
        plan.following -= set(plan.messages)

    async def _apply_scrub(self: MemoryStore, plan: ScrubPlan) -> None:
        """Write a plan's changes and re-index what they touched (inside a transaction)."""
        await self.db.executemany(
            "UPDATE messages SET content = ?, meta = ? WHERE id = ?",
            [(content, meta, mid) for mid, (content, meta) in plan.messages.items()],
        )
        for mid in sorted({*plan.messages, *plan.following}):
            await self._reindex_message(mid)
        await self.db.executemany(
            "UPDATE sessions SET title = ?, pending_reason = ? WHERE id = ?",
            [(title, reason, sid) for sid, (title, reason) in plan.sessions.items()],
        )
        for memory_id, changes in plan.memories.items():
            await redact_memory(self, memory_id, changes)
        await self.db.executemany(
            "UPDATE memory_history SET old = ?, new = ? WHERE id = ?",
            [(old, new, hid) for hid, (old, new) in plan.history.items()],
        )
        for key, value in plan.meta.items():
            await self._set_meta(key, value)
        if plan.entities:
            marks = ",".join("?" * len(plan.entities))
            await self.db.execute(f"DELETE FROM entities WHERE id IN ({marks})", plan.entities)
        await self.db.executemany(
            "DELETE FROM entity_aliases WHERE norm = ?", [(norm,) for norm in plan.aliases]
        )
        await self.db.executemany(
            "UPDATE reply_feedback SET note = ? WHERE message_id = ?",
            [(note, mid) for mid, note in plan.notes.items()],
        )

    # -- the file's bytes ------------------------------------------------------------------------

    async def _merge_indexes(self: MemoryStore, *, messages: bool = True) -> None:
        """Merge the full-text indexes so deleted terms leave their pages (secure_delete zeroes
        freed ones), and re-sample planner statistics that keep index keys."""
        async with self.db.transaction():
            await self.db.execute("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')")
            if messages:  # a full merge costs as much as the index is large
                await self.db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")
            # SQLite's stat4 samples copy whole index keys (values, entity names).
            if await self.db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'sqlite_stat4'"):
                await self.db.execute("ANALYZE memories")
                await self.db.execute("ANALYZE entities")

    async def _note_pending(self: MemoryStore, ids: list[int], reason: str) -> None:
        """Record a scrub as unfinished (inside a transaction); ids and times, never text."""
        pending = [p for p in await self._pending() if p["ids"] != ids]
        pending.append({"ids": ids, "since": now_iso(), "reason": reason})
        await self._set_meta(PENDING_KEY, json.dumps(pending))

    async def _purge_free_space(
        self: MemoryStore, ids: list[int], *, messages: bool = True
    ) -> str | None:
        """Merge the indexes (``_merge_indexes``), then fold the WAL into the file and truncate
        it. Returns why that must wait, or None when done. A pending record of ``ids`` (see
        ``forget``) is cleared once done, else it stays for ``retry_scrubs``: a full disk
        here does not undo the forget, which is already saved."""
        try:
            await self._merge_indexes(messages=messages)
            done = await self._checkpoint_truncate(FORGET_WAIT_MS)
        except (DiskFull, DiskError) as exc:
            log.warning("forgotten text stays in the memory file's free space: %s", exc)
            return DISK_FULL if isinstance(exc, DiskFull) else DISK_ERROR
        if not done:
            log.warning("forgotten text stays in the memory file until its reader closes")
            async with self.db.transaction():
                await self._note_pending(ids, WAITING)
            return WAITING
        async with self.db.transaction():
            pending = await self._pending()
            left = [p for p in pending if p["ids"] != ids]
            if left != pending:
                await self._set_meta(PENDING_KEY, json.dumps(left) if left else None)
        if left != pending:
            await self._checkpoint_truncate(RETRY_WAIT_MS)  # leave the log empty again
        return None

    async def _checkpoint_truncate(self: MemoryStore, wait_ms: int) -> bool:
        """Copy every logged page into the file and empty the log; False when a reader still
        uses older pages (after waiting up to ``wait_ms``)."""
        async with self.db.reading():
            await self.db.execute(f"PRAGMA busy_timeout = {int(wait_ms)}")
            try:
                busy, log_pages, _ = await self.db.fetchone("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                await self.db.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
        return not busy and log_pages in (0, -1)

    async def _pending(self: MemoryStore) -> list[dict[str, Any]]:
        raw = await self.db.scalar("SELECT value FROM meta WHERE key = ?", (PENDING_KEY,))
        return json.loads(raw) if raw else []

    async def pending_scrubs(self: MemoryStore) -> list[dict[str, Any]]:
        """Forgets whose text is still in the file's old pages: ``ids``, ``since``, ``reason``."""
        async with self.db.reading():
            return await self._pending()

    async def retry_scrubs(self: MemoryStore, wait_ms: int = RETRY_WAIT_MS) -> list[dict[str, Any]]:
        """Try the pending scrubs again; returns the ones now complete. A full disk raises."""
        before = await self.pending_scrubs()
        if not before:
            return []
        await self._merge_indexes()  # a no-op unless an earlier merge did not finish
        if not await self._checkpoint_truncate(wait_ms):
            return []
        async with self.db.transaction():
            # A forget that became pending after the checkpoint above stays pending.
            left = [p for p in await self._pending() if p not in before]
            await self._set_meta(PENDING_KEY, json.dumps(left) if left else None)
        await self._checkpoint_truncate(wait_ms)  # leave the log empty again
        return before

    # -- summaries rewritten after a redaction -----------------------------------------------

    async def redacted_summaries(self: MemoryStore) -> list[Memory]:
        """Session summaries and reflections that still show where text was forgotten."""
        async with self.db.reading():
            rows = await self.db.fetchall(
                "SELECT * FROM memories WHERE kind IN ('episode', 'reflection')"
                " AND instr(value, ?) > 0 ORDER BY id",
                (MARKER,),
            )
        return [Memory.from_row(r) for r in rows]

    async def rewrite_summary(self: MemoryStore, memory_id: int, was: str, text: str) -> bool:
        """Replace a redacted summary by a rewritten one, unless it changed meanwhile."""
        async with self.db.transaction():
            row = await self.db.fetchone("SELECT * FROM memories WHERE id = ?", (memory_id,))
            if row is None or row["value"] != was or row["kind"] not in _SUMMARY_KINDS:
                return False
            await self.db.execute(
                "UPDATE memories SET value = ?, updated_at = ? WHERE id = ?",
                (text, now_iso(), memory_id),
            )
            await self._unindex_memory(memory_id)
            await self._index_memory(await self._row(memory_id))
            await self._history(
                memory_id, "rewrite", "forget", old={"value": was}, new={"value": text}
            )
        return True
