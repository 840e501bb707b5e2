"""Listing memories and the profile's figures (texts still waiting for a vector among them),
one copy for both backends. Each store adds to the figures what only it has (``_own_stats``:
the file's size, the server's substring search)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from navi_desktop.errors import InvalidInput
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.facts import MEMORY_COLUMNS
from navi_desktop.memory.models import CATEGORIES, KINDS, STATUSES, Memory

if TYPE_CHECKING:
    from navi_desktop.memory.backends import Store

SORTS = {
    "updated": "updated_at",
    "created": "created_at",
    "strength": "strength",
    "confidence": "confidence",
    "id": "id",
}


class ListingOps:
    async def list_memories(
        self: Store,
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
        """A page of memories and the total that match. ``status=None`` means every status;
        ``current`` leaves out facts past their expiry (not yet archived by maintenance)."""
        where, params = ["true"], []
        if current:
            where.append("(expires_at IS NULL OR expires_at > ?)")
            params.append(now_iso())
        for name, value, allowed in (
            ("kind", kind, KINDS),
            ("category", category, CATEGORIES),
            ("status", status, STATUSES),
        ):
            if value is not None:
                if value not in allowed:
                    raise InvalidInput(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
                where.append(f"{name} = ?")
                params.append(value)
        if pinned is not None:
            where.append("pinned = ?")
            params.append(int(pinned))
        if sort not in SORTS:
            raise InvalidInput(f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
        if limit < 1 or offset < 0:
            raise InvalidInput("limit must be at least 1 and offset not negative")
        clause = " AND ".join(where)
        order = f"{SORTS[sort]} {'DESC' if descending else 'ASC'}, id DESC"
        async with self.db.reading():
            total = await self.db.scalar(f"SELECT count(*) FROM memories WHERE {clause}", params)
            rows = await self.db.fetchall(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {clause} ORDER BY {order}"
                " LIMIT ? OFFSET ?",
                (*params, limit, offset),
            )
        return [Memory.from_row(r) for r in rows], int(total)

    async def stats(self: Store) -> dict[str, Any]:
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
        memories: dict[str, dict[str, int]] = {}
        for kind, status, n in by_status:
            memories.setdefault(kind, {})[status] = n
        return {
            "memories": memories,
            "facts_by_category": {c: n for c, n in by_category},
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
            **await self._own_stats(),
        }

    async def missing_embeddings(self: Store) -> int:
        """Texts without a vector of the current model at its current size, as the model last
        answered this store (the embedding pass's work left)."""
        if self.embedder is None:
            return 0
        async with self.db.reading():
            return int(
                await self.db.scalar(
                    "SELECT (SELECT count(*) FROM memories m WHERE status IN ('active', 'held')"
                    "  AND NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.memory_id = m.id"
                    "  AND e.model = ?1 AND e.dim = coalesce(?2, e.dim)))"
                    " + (SELECT count(*) FROM messages g WHERE NOT EXISTS (SELECT 1 FROM embeddings"
                    "  e WHERE e.message_id = g.id AND e.model = ?1"
                    "  AND e.dim = coalesce(?2, e.dim)))",
                    (self.embedder.model, self._known_size()),
                )
            )
