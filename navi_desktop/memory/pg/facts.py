"""Writing and reading memories on the server: add/upsert, strengthen, supersede, pin, edit,
list, history (edit and the other changes of state: states.py). The rules are the SQLite
side's (facts.py, states.py, editing.py); the statements are PostgreSQL's."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.expiry import check_expires_at
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.facts import (
    AWAITING_REPEAT,
    INSERT_COLUMNS,
    NewMemory,
    WriteResult,
    _snapshot,
    restated_expiry,
)
from navi_desktop.memory.maintenance import SORTS
from navi_desktop.memory.models import CATEGORIES, KINDS, STATUSES, HistoryEntry, Memory
from navi_desktop.memory.textproc import normalize

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore

MEMORY_COLUMNS = ", ".join(Memory.__dataclass_fields__) + ", norm_key"


class PgFactOps:
    async def _history(
        self: PgMemoryStore,
        memory_id: int,
        action: str,
        actor: str,
        old: dict[str, Any] | None = None,
        new: dict[str, Any] | None = None,
    ) -> None:
        await self.db.execute(
            "INSERT INTO memory_history (memory_id, action, actor, at, old, new)"
            " VALUES ($1, $2, $3, $4, $5, $6)",
            (
                memory_id,
                action,
                actor,
                now_iso(),
                json.dumps(old, ensure_ascii=False) if old else None,
                json.dumps(new, ensure_ascii=False) if new else None,
            ),
        )

    async def _row(self: PgMemoryStore, memory_id: int) -> Any:
        row = await self.db.fetchone(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = $1", (memory_id,)
        )
        if row is None:
            raise NotFound(f"no memory with id {memory_id}")
        return row

    async def get(self: PgMemoryStore, memory_id: int) -> Memory:
        async with self.db.reading():
            return Memory.from_row(await self._row(memory_id))

    async def _older_versions(self: PgMemoryStore, memory_id: int) -> list[Any]:
        return await self.db.fetchall(
            "WITH RECURSIVE older(id, depth) AS ("
            " SELECT id, 1 FROM memories WHERE superseded_by = $1"
            " UNION SELECT m.id, older.depth + 1 FROM memories m"
            " JOIN older ON m.superseded_by = older.id WHERE older.depth < 1000)"
            f" SELECT {', '.join('m.' + c for c in MEMORY_COLUMNS.split(', '))}"
            " FROM older JOIN memories m USING (id) ORDER BY depth",
            (memory_id,),
        )

    async def versions(self: PgMemoryStore, memory_id: int) -> list[Memory]:
        async with self.db.reading():
            await self._row(memory_id)
            return [Memory.from_row(r) for r in await self._older_versions(memory_id)]

    async def history(self: PgMemoryStore, memory_id: int) -> list[HistoryEntry]:
        async with self.db.reading():
            await self._row(memory_id)
            rows = await self.db.fetchall(
                "SELECT id, memory_id, action, actor, at, old, new FROM memory_history"
                " WHERE memory_id = $1 ORDER BY id",
                (memory_id,),
            )
        return [HistoryEntry.from_row(r) for r in rows]

    # -- add / upsert --------------------------------------------------------------------------

    async def add_memory(
        self: PgMemoryStore, value: str, *, actor: str = "user", **fields: Any
    ) -> WriteResult:
        return (await self.add_memories([NewMemory(value=value, **fields)], actor=actor))[0]

    async def add_memories(
        self: PgMemoryStore, batch: list[NewMemory], *, actor: str = "user"
    ) -> list[WriteResult]:
        """A batch in one transaction: all of it lands, or none of it."""
        for item in batch:
            item.check()
            if item.expires_at is not None:
                item.expires_at = check_expires_at(item.expires_at)
        async with self.db.transaction():
            return [await self._upsert(item, actor) for item in batch]

    async def _upsert(self: PgMemoryStore, item: NewMemory, actor: str) -> WriteResult:
        value, norm_key = item.value.strip(), item.norm_key
        if await self._tombstoned(item.kind, norm_key, value) or await self._forgotten_phrase(
            [value, item.evidence]
        ):
            if item.source != "user_explicit" or actor != "user":
                return WriteResult("blocked", None)
            await self._lift_tombstones(item.kind, norm_key, value)
        current = await self._current_match(item.kind, norm_key, value)
        if current is not None and normalize(current["value"]) == normalize(value):
            if (change := restated_expiry(current, item)) is not None:
                await self.db.execute(
                    "UPDATE memories SET expires_at = $1 WHERE id = $2", (change[0], current["id"])
                )
                await self._history(
                    current["id"],
                    "edit",
                    actor,
                    old={"expires_at": current["expires_at"]},
                    new={"expires_at": change[0]},
                )
            return await self._strengthen(current, item.confidence, actor)
        new_id = await self._insert(item, actor)
        if current is not None and current["status"] == "active" and item.status == "active":
            await self._supersede(current["id"], new_id, actor)
            return WriteResult(
                "superseded", Memory.from_row(await self._row(new_id)), replaced=current["id"]
            )
        return WriteResult("added", Memory.from_row(await self._row(new_id)))

    async def _strengthen(
        self: PgMemoryStore, row: Any, confidence: float, actor: str
    ) -> WriteResult:
        promote = row["status"] == "held" and row["review_reason"] == AWAITING_REPEAT
        await self.db.execute(
            "UPDATE memories SET mentions = mentions + 1, strength = 1.0,"
            " confidence = greatest(confidence, $1), updated_at = $2,"
            " status = CASE WHEN $3 THEN 'active' ELSE status END,"
            " review_reason = CASE WHEN $3 THEN NULL ELSE review_reason END WHERE id = $4",
            (float(confidence), now_iso(), promote, row["id"]),
        )
        new: dict[str, Any] = {"mentions": row["mentions"] + 1}
        if promote:
            new["status"] = "active"
            await self._mark_profile_stale()
        await self._history(row["id"], "strengthen", actor, new=new)
        return WriteResult("strengthened", Memory.from_row(await self._row(row["id"])))

    async def _current_match(
        self: PgMemoryStore, kind: str, norm_key: str | None, value: str
    ) -> Any | None:
        if norm_key:
            rows = await self.db.fetchall(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE norm_key = $1 AND kind = $2"
                " AND status IN ('active', 'held') ORDER BY status = 'active' DESC, id DESC",
                (norm_key, kind),
            )
            for row in rows:
                if normalize(row["value"]) == normalize(value):
                    return row
            return rows[0] if rows and rows[0]["status"] == "active" else None
        for row in await self.db.fetchall(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE norm_key IS NULL AND kind = $1"
            " AND lower(value) = lower($2) AND status IN ('active', 'held')",
            (kind, value),
        ):
            if normalize(row["value"]) == normalize(value):
                return row
        return None

    async def _insert(self: PgMemoryStore, item: NewMemory, actor: str) -> int:
        await self._check_source(item)
        values = item.values(now_iso())
        marks = ", ".join(f"${i}" for i in range(1, len(values) + 1))
        new_id = await self.db.scalar(
            f"INSERT INTO memories ({INSERT_COLUMNS}) VALUES ({marks}) RETURNING id", values
        )
        row = await self._row(new_id)
        await self._index_memory(row)
        await self._history(new_id, "create", actor, new=_snapshot(row))
        await self._mark_profile_stale()
        return new_id

    async def _check_source(self: PgMemoryStore, item: NewMemory) -> None:
        if item.session_id is not None and not await self.db.scalar(
            "SELECT 1 FROM sessions WHERE id = $1", (item.session_id,)
        ):
            raise NotFound(f"no session with id {item.session_id!r}")
        for name in ("message_from", "message_to"):
            message_id = getattr(item, name)
            if message_id is None:
                continue
            owner = await self.db.scalar(
                "SELECT session_id FROM messages WHERE id = $1", (message_id,)
            )
            if owner is None:
                raise NotFound(f"no message with id {message_id} ({name})")
            if owner != item.session_id:
                raise InvalidInput(
                    f"message {message_id} ({name}) is not in session {item.session_id!r}"
                )

    async def _supersede(self: PgMemoryStore, old_id: int, new_id: int, actor: str) -> None:
        now = now_iso()
        await self.db.execute(
            "UPDATE memories SET status = 'superseded', valid_to = $1, superseded_by = $2,"
            " updated_at = $1 WHERE id = $3",
            (now, new_id, old_id),
        )
        await self._history(old_id, "superseded", actor, new={"superseded_by": new_id})
        await self._history(new_id, "supersedes", actor, new={"supersedes": old_id})

    async def _mark_profile_stale(self: PgMemoryStore) -> None:
        await self._set_meta("profile_summary_stale", "1")

    # -- states and edits -----------------------------------------------------------------------

    async def pin(
        self: PgMemoryStore, memory_id: int, pinned: bool = True, actor: str = "user"
    ) -> Memory:
        """A pinned memory never fades (strength back to full)."""
        async with self.db.transaction():
            row = await self._row(memory_id)
            if row["status"] not in ("active", "held", "archived"):
                action = "pin" if pinned else "unpin"
                raise InvalidInput(f"cannot {action} memory {memory_id}: it is {row['status']}")
            await self.db.execute(
                "UPDATE memories SET pinned = $1, strength = 1.0, updated_at = $2 WHERE id = $3",
                (int(pinned), now_iso(), memory_id),
            )
            await self._history(
                memory_id,
                "pin" if pinned else "unpin",
                actor,
                old={"status": row["status"], "pinned": row["pinned"]},
                new={"status": row["status"], "pinned": int(pinned)},
            )
            return Memory.from_row(await self._row(memory_id))

    async def list_memories(
        self: PgMemoryStore,
        *,
        kind: str | None = None,
        category: str | None = None,
        status: str | None = "active",
        pinned: bool | None = None,
        sort: str = "updated",
        descending: bool = True,
        limit: int = 50,
        offset: int = 0,
        current: bool = False,
    ) -> tuple[list[Memory], int]:
        """A page of memories and the total that match (see the SQLite side)."""
        where, params = ["true"], []
        if current:
            params.append(now_iso())
            where.append(f"(expires_at IS NULL OR expires_at > ${len(params)})")
        for name, value, allowed in (
            ("kind", kind, KINDS),
            ("category", category, CATEGORIES),
            ("status", status, STATUSES),
        ):
            if value is not None:
                if value not in allowed:
                    raise InvalidInput(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
                params.append(value)
                where.append(f"{name} = ${len(params)}")
        if pinned is not None:
            params.append(int(pinned))
            where.append(f"pinned = ${len(params)}")
        if sort not in SORTS:
            raise InvalidInput(f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
        if limit < 1 or offset < 0:
            raise InvalidInput("limit must be at least 1 and offset not negative")
        clause = " AND ".join(where)
        order = f"{SORTS[sort]} {'DESC' if descending else 'ASC'}, id DESC"
        n = len(params)
        async with self.db.reading():
            total = await self.db.scalar(f"SELECT count(*) FROM memories WHERE {clause}", params)
            rows = await self.db.fetchall(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {clause} ORDER BY {order}"
                f" LIMIT ${n + 1} OFFSET ${n + 2}",
                (*params, limit, offset),
            )
        return [Memory.from_row(r) for r in rows], int(total)

    async def stats(self: PgMemoryStore) -> dict[str, Any]:
        async with self.db.reading():
            by_status = await self.db.fetchall(
                "SELECT kind, status, count(*) FROM memories GROUP BY kind, status"
            )
            by_category = await self.db.fetchall(
                "SELECT coalesce(category, 'none'), count(*) FROM memories"
                " WHERE kind = 'fact' AND status = 'active' GROUP BY 1"
            )
            models = await self.db.fetchall(
                "SELECT model, dim, count(*) FROM embeddings GROUP BY model, dim"
            )
            counts = await self.db.fetchone(
                "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM messages),"
                " (SELECT count(*) FROM tombstones), (SELECT count(*) FROM entities),"
                " (SELECT count(*) FROM memories WHERE pinned = 1)"
            )
            stale = await self.db.scalar(
                "SELECT value FROM meta WHERE key = 'profile_summary_stale'"
            )
            trigram = bool(
                await self.db.scalar("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")
            )
        memories: dict[str, dict[str, int]] = {}
        for kind, state, n in by_status:
            memories.setdefault(kind, {})[state] = n
        return {
            "path": self.where,
            "backend": "postgres",
            "memories": memories,
            "facts_by_category": dict(by_category),
            "pinned": counts[4],
            "sessions": counts[0],
            "messages": counts[1],
            "tombstones": counts[2],
            "entities": counts[3],
            "embeddings": [{"model": m, "dim": d, "count": n} for m, d, n in models],
            "embedding_model": self.embedder.model if self.embedder else None,
            "missing_embeddings": await self.missing_embeddings() if self.embedder else None,
            "profile_summary_stale": stale == "1",
            "pending_scrubs": await self.pending_scrubs(),
            "rated_replies": await self.feedback_counts(),
            "substring_search": "pg_trgm" if trigram else "ILIKE (pg_trgm not installed)",
        }
