"""Entities found by a model, stored beside the regex fast path's (``store._link_entities``),
one copy for both backends.

Which memories still need the model's reading, and saving what it found: the names link to
the memory like the fast path's, an entity without a type takes the model's, and the memory
is marked read (``entities_enriched``) whether or not a name was found, so it is not asked
about again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.facts import MEMORY_COLUMNS
from navi_desktop.memory.models import Memory
from navi_desktop.memory.textproc import normalize

if TYPE_CHECKING:
    from navi_desktop.memory.backends import Store

ENTITY_TYPES = ("person", "organisation", "project", "location", "other")


class EnrichmentOps:
    async def needing_entities(self: Store, *, limit: int = 32, few: int = 1) -> list[Memory]:
        """Active facts and summaries, newest first, with at most ``few`` entities linked and
        not read by a model yet."""
        columns = ", ".join("m." + c for c in MEMORY_COLUMNS.split(", "))
        async with self.db.reading():
            rows = await self.db.fetchall(
                f"SELECT {columns} FROM memories m WHERE m.kind IN ('fact', 'episode')"
                " AND m.status = 'active'"
                " AND NOT EXISTS (SELECT 1 FROM entities_enriched e WHERE e.memory_id = m.id)"
                " AND (SELECT count(*) FROM entity_links l WHERE l.memory_id = m.id) <= ?"
                " ORDER BY m.id DESC LIMIT ?",
                (few, limit),
            )
        return [Memory.from_row(r) for r in rows]

    async def save_model_entities(
        self: Store, found: dict[int, list[tuple[str, str]]], model: str
    ) -> int:
        """Link each memory's (name, type) pairs and mark every memory in ``found`` read by
        ``model``; a memory that went meanwhile is skipped. Returns the links added."""
        at = now_iso()
        added = 0
        async with self.db.transaction():
            for memory_id, names in found.items():
                if not await self.db.scalar("SELECT 1 FROM memories WHERE id = ?", (memory_id,)):
                    continue
                before = await self._links(memory_id)
                await self._link_entities("memory_id", memory_id, [n for n, _ in names])
                added += await self._links(memory_id) - before
                await self.db.executemany(
                    "UPDATE entities SET type = ? WHERE norm = ? AND type IS NULL",
                    [(kind, normalize(name)) for name, kind in names if kind in ENTITY_TYPES],
                )
                await self.db.execute(
                    "INSERT INTO entities_enriched (memory_id, model, at) VALUES (?, ?, ?)"
                    " ON CONFLICT (memory_id) DO UPDATE SET model = excluded.model,"
                    " at = excluded.at",
                    (memory_id, model, at),
                )
        return added

    async def _links(self: Store, memory_id: int) -> int:
        return await self.db.scalar(
            "SELECT count(*) FROM entity_links WHERE memory_id = ?", (memory_id,)
        )
