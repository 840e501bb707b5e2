"""Writing memories: add/upsert, strengthen, supersede. (Correct and edit are in
``editing.py``; pin, confirm, archive and accept in ``states.py``.)"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.expiry import check_expires_at, parse_time, stored
from navi_desktop.limits import check_memory_fields
from navi_desktop.memory.clock import check_iso, now_iso
from navi_desktop.memory.models import CATEGORIES, KINDS, SOURCES, HistoryEntry, Memory
from navi_desktop.memory.textproc import normalize, normalize_key

if TYPE_CHECKING:
    from navi_desktop.memory.backends import Store

# A memory's and a history entry's columns, named: the server's tables carry more (the owner,
# the words' vector), and a row must read the same from either backend.
MEMORY_COLUMNS = ", ".join(Memory.__dataclass_fields__) + ", norm_key"
HISTORY_COLUMNS = ", ".join(HistoryEntry.__dataclass_fields__)
# A held memory with this reason is committed when the same fact comes up again.
AWAITING_REPEAT = "uncertain: kept until it comes up again"
EDITABLE = ("category", "subject", "key", "value", "evidence", "confidence", "expires_at")
_SNAPSHOT = (
    "kind",
    "category",
    "subject",
    "key",
    "value",
    "evidence",
    "source",
    "confidence",
    "status",
    "pinned",
    "session_id",
)


@dataclass
class NewMemory:
    """A memory to write. ``add_memories`` takes a batch of these as one transaction."""

    value: str
    kind: str = "fact"
    category: str | None = None
    subject: str | None = None
    key: str | None = None
    evidence: str | None = None
    source: str = "user_explicit"
    confidence: float = 1.0
    session_id: str | None = None
    message_from: int | None = None
    message_to: int | None = None
    status: str = "active"
    pinned: bool = False
    review_reason: str | None = None  # why a held memory waits (shown in the review inbox)
    at: str | None = None
    expires_at: str | None = None  # a fact that holds until then (ISO date or time)

    def check(self) -> None:
        if not isinstance(self.value, str) or not self.value.strip():
            raise InvalidInput("a memory needs a non-empty value")
        # Held here, whatever the way in: the CLI on the file stored what the daemon refused.
        check_memory_fields(
            value=self.value,
            evidence=self.evidence,
            subject=self.subject,
            key=self.key,
            review_reason=self.review_reason,
        )
        if self.kind not in KINDS:
            raise InvalidInput(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.category is not None and self.category not in CATEGORIES:
            raise InvalidInput(
                f"category must be one of {', '.join(CATEGORIES)}, got {self.category!r}"
            )
        if self.source not in SOURCES:
            raise InvalidInput(f"source must be one of {', '.join(SOURCES)}, got {self.source!r}")
        if self.status not in ("active", "held"):
            raise InvalidInput(f"a new memory is 'active' or 'held', not {self.status!r}")
        if not isinstance(self.confidence, int | float) or not 0 <= self.confidence <= 1:
            raise InvalidInput(f"confidence must be between 0 and 1, got {self.confidence!r}")
        if self.expires_at is not None:
            if self.kind != "fact":
                raise InvalidInput(
                    f"only a fact can expire, not a {self.kind}: leave out the expiry"
                    " (archive it when it no longer applies)"
                )
            if not isinstance(self.expires_at, str):
                raise InvalidInput(
                    f"expires_at must be an ISO date or time, got {self.expires_at!r}"
                )
            parse_time(self.expires_at, "expires_at")

    @property
    def norm_key(self) -> str | None:
        """The fact's identity (see ``normalize_key``); None for a memory without a key."""
        return normalize_key(self.subject, self.key) if self.key else None

    def values(self, now: str) -> tuple[Any, ...]:
        """The new row's INSERT_COLUMNS, written ``now`` (both backends insert these)."""
        at = check_iso(self.at, "at") if self.at else now
        return (
            self.kind,
            self.category,
            self.subject,
            self.key,
            self.norm_key,
            self.value.strip(),
            self.evidence,
            self.source,
            float(self.confidence),
            self.session_id,
            self.message_from,
            self.message_to,
            self.status,
            int(self.pinned),
            at,
            now,
            at,
            self.review_reason if self.status == "held" else None,
            stored(parse_time(self.expires_at, "expires_at")) if self.expires_at else None,
        )


# What NewMemory.values gives, in its order.
INSERT_COLUMNS = (
    "kind, category, subject, key, norm_key, value, evidence, source, confidence, session_id,"
    " message_from, message_to, status, pinned, created_at, updated_at, valid_from,"
    " review_reason, expires_at"
)


@dataclass
class WriteResult:
    """What a write did: 'added', 'strengthened', 'superseded' or 'blocked' (tombstoned)."""

    action: str
    memory: Memory | None
    replaced: int | None = None


def _snapshot(row: Any) -> dict[str, Any]:
    snapshot = {k: row[k] for k in _SNAPSHOT}
    if row["expires_at"]:
        snapshot["expires_at"] = row["expires_at"]
    return snapshot


def restated_expiry(row: Any, item: NewMemory) -> tuple[str | None] | None:
    """The same fact said again: a new expiry replaces the old one; said again without one
    after it expired, it holds again (an absent expiry alone never clears a current one).
    The expiry to store, in a 1-tuple, or None for no change."""
    expires = stored(parse_time(item.expires_at, "expires_at")) if item.expires_at else None
    if expires is None and not (row["expires_at"] and row["expires_at"] <= now_iso()):
        return None
    if expires == row["expires_at"]:
        return None
    return (expires,)


class FactOps:
    async def _history(
        self: Store,
        memory_id: int,
        action: str,
        actor: str,
        old: dict[str, Any] | None = None,
        new: dict[str, Any] | None = None,
        *,
        at: str | None = None,
    ) -> None:
        await self.db.execute(
            "INSERT INTO memory_history (memory_id, action, actor, at, old, new)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                memory_id,
                action,
                actor,
                at or now_iso(),
                json.dumps(old, ensure_ascii=False) if old else None,
                json.dumps(new, ensure_ascii=False) if new else None,
            ),
        )

    async def _row(self: Store, memory_id: int) -> Any:
        row = await self.db.fetchone(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ?", (memory_id,)
        )
        if row is None:
            raise NotFound(f"no memory with id {memory_id}")
        return row

    async def get(self: Store, memory_id: int) -> Memory:
        async with self.db.reading():
            return Memory.from_row(await self._row(memory_id))

    async def versions(self: Store, memory_id: int) -> list[Memory]:
        """The earlier versions this memory replaced, newest first."""
        async with self.db.reading():
            await self._row(memory_id)
            rows = await self._older_versions(memory_id)
        return [Memory.from_row(r) for r in rows]

    async def _older_versions(self: Store, memory_id: int) -> list[Any]:
        """Rows of every version ``memory_id`` replaced, directly or not, nearest first."""
        return await self.db.fetchall(
            "WITH RECURSIVE older(id, depth) AS ("
            " SELECT id, 1 FROM memories WHERE superseded_by = ?"
            " UNION SELECT m.id, older.depth + 1 FROM memories m"
            " JOIN older ON m.superseded_by = older.id WHERE older.depth < 1000)"
            f" SELECT {', '.join('m.' + c for c in MEMORY_COLUMNS.split(', '))}"
            " FROM older JOIN memories m USING (id) ORDER BY depth",
            (memory_id,),
        )

    async def history(self: Store, memory_id: int) -> list[HistoryEntry]:
        async with self.db.reading():
            await self._row(memory_id)
            rows = await self.db.fetchall(
                f"SELECT {HISTORY_COLUMNS} FROM memory_history WHERE memory_id = ? ORDER BY id",
                (memory_id,),
            )
        return [HistoryEntry.from_row(r) for r in rows]

    # -- add / upsert --------------------------------------------------------------------------

    async def add_memory(
        self: Store, value: str, *, actor: str = "user", **fields: Any
    ) -> WriteResult:
        return (await self.add_memories([NewMemory(value=value, **fields)], actor=actor))[0]

    async def add_memories(
        self: Store, batch: list[NewMemory], *, actor: str = "user"
    ) -> list[WriteResult]:
        """Write a batch in one transaction: all of it lands, or (on any error) none of it.
        An expiry given here must be ahead (extraction and imports may carry past ones)."""
        for item in batch:
            item.check()
            if item.expires_at is not None:
                item.expires_at = check_expires_at(item.expires_at)
        async with self.db.transaction():
            return [await self._upsert(item, actor) for item in batch]

    async def _upsert(self: Store, item: NewMemory, actor: str) -> WriteResult:
        value, norm_key = item.value.strip(), item.norm_key
        if await self._tombstoned(item.kind, norm_key, value) or await self._forgotten_phrase(
            [value, item.evidence]
        ):
            # Only the user, by hand, brings a forgotten memory back: not extraction, not a
            # model's tool call (whatever source it claims), not an import.
            if item.source != "user_explicit" or actor != "user":
                return WriteResult("blocked", None)
            await self._lift_tombstones(item.kind, norm_key, value)
        current = await self._current_match(item.kind, norm_key, value)
        if current is not None and normalize(current["value"]) == normalize(value):
            await self._restated_expiry(current, item, actor)
            return await self._strengthen(current, item.confidence, actor)
        new_id = await self._insert(item, actor)
        # A candidate held for review replaces nothing until it is accepted.
        if current is not None and current["status"] == "active" and item.status == "active":
            await self._supersede(current["id"], new_id, actor)
            return WriteResult(
                "superseded", Memory.from_row(await self._row(new_id)), replaced=current["id"]
            )
        return WriteResult("added", Memory.from_row(await self._row(new_id)))

    async def _strengthen(self: Store, row: Any, confidence: float, actor: str) -> WriteResult:
        """The same memory again: more mentions, full strength; a candidate that was waiting
        for a repetition becomes active."""
        promote = row["status"] == "held" and row["review_reason"] == AWAITING_REPEAT
        await self.db.execute(
            "UPDATE memories SET mentions = mentions + 1, strength = 1.0,"
            " confidence = CASE WHEN confidence < ?1 THEN ?1 ELSE confidence END, updated_at = ?,"
            " status = CASE WHEN ?3 THEN 'active' ELSE status END,"
            " review_reason = CASE WHEN ?3 THEN NULL ELSE review_reason END WHERE id = ?",
            (float(confidence), now_iso(), promote, row["id"]),
        )
        new: dict[str, Any] = {"mentions": row["mentions"] + 1}
        if promote:
            new["status"] = "active"
            await self._mark_profile_stale()
        await self._history(row["id"], "strengthen", actor, new=new)
        return WriteResult("strengthened", Memory.from_row(await self._row(row["id"])))

    async def _restated_expiry(self: Store, row: Any, item: NewMemory, actor: str) -> None:
        change = restated_expiry(row, item)
        if change is None:
            return
        await self.db.execute(
            "UPDATE memories SET expires_at = ? WHERE id = ?", (change[0], row["id"])
        )
        await self._history(
            row["id"],
            "edit",
            actor,
            old={"expires_at": row["expires_at"]},
            new={"expires_at": change[0]},
        )

    async def strengthen(
        self: Store, memory_id: int, *, confidence: float = 0.0, actor: str = "extraction"
    ) -> WriteResult:
        async with self.db.transaction():
            return await self._strengthen(await self._row(memory_id), confidence, actor)

    async def _current_match(
        self: Store, kind: str, norm_key: str | None, value: str
    ) -> Any | None:
        """The live memory this one would duplicate or replace: one with the same key, or for
        a memory without a key (rules, summaries), one with the same text."""
        if norm_key:
            rows = await self.db.fetchall(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE norm_key = ? AND kind = ?"
                " AND status IN ('active', 'held') ORDER BY status = 'active' DESC, id DESC",
                (norm_key, kind),
            )
            # The same value (even one held for review) is a repetition; otherwise the new
            # value replaces the current one, and held candidates stay for the user to review.
            for row in rows:
                if normalize(row["value"]) == normalize(value):
                    return row
            return rows[0] if rows and rows[0]["status"] == "active" else None
        candidates = await self.db.fetchall(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE norm_key IS NULL AND kind = ?"
            f" AND {self.SAME_VALUE} AND status IN ('active', 'held')",
            (kind, value),
        )
        for row in candidates:
            if normalize(row["value"]) == normalize(value):
                return row
        return None

    async def _insert(self: Store, item: NewMemory, actor: str) -> int:
        await self._check_source(item)
        values = item.values(now_iso())
        new_id = await self.db.scalar(
            f"INSERT INTO memories ({INSERT_COLUMNS}) VALUES ({', '.join('?' * len(values))})"
            " RETURNING id",
            values,
        )
        row = await self._row(new_id)
        await self._index_memory(row)
        await self._history(new_id, "create", actor, new=_snapshot(row))
        await self._mark_profile_stale()
        return new_id

    async def _check_source(self: Store, item: NewMemory) -> None:
        """The session and messages a memory names must exist (and the messages be the
        session's): an unknown one is the caller's mistake, not a database error."""
        if item.session_id is not None and not await self.db.scalar(
            "SELECT 1 FROM sessions WHERE id = ?", (item.session_id,)
        ):
            raise NotFound(f"no session with id {item.session_id!r}")
        for name in ("message_from", "message_to"):
            message_id = getattr(item, name)
            if message_id is None:
                continue
            owner = await self.db.scalar(
                "SELECT session_id FROM messages WHERE id = ?", (message_id,)
            )
            if owner is None:
                raise NotFound(f"no message with id {message_id} ({name})")
            if owner != item.session_id:
                raise InvalidInput(
                    f"message {message_id} ({name}) is not in session {item.session_id!r}"
                )

    async def _supersede(self: Store, old_id: int, new_id: int, actor: str) -> None:
        now = now_iso()
        await self.db.execute(
            "UPDATE memories SET status = 'superseded', valid_to = ?1, superseded_by = ?2,"
            " updated_at = ?1 WHERE id = ?3",
            (now, new_id, old_id),
        )
        # Only ids cross between rows' histories: forgetting one version must not leave its
        # text in another's history.
        await self._history(old_id, "superseded", actor, new={"superseded_by": new_id})
        await self._history(new_id, "supersedes", actor, new={"supersedes": old_id})

    async def _mark_profile_stale(self: Store) -> None:
        await self._set_meta("profile_summary_stale", "1")
