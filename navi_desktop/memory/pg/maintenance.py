"""Maintenance on the server: planner statistics and missing embeddings. Expiry, decay and
recall are the file's code (maintenance.FadingOps) on the server's database."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from navi_desktop.memory.pg.scrub import NOT_OWNER

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore

log = logging.getLogger(__name__)
# What the periodic maintenance re-samples: the tables whose sizes steer the search plans.
ANALYZED = ("memories", "messages", "embeddings", "entities", "entity_links", "memory_history")


class PgMaintenanceOps:
    async def optimize(self: PgMemoryStore) -> None:
        """Refresh the planner's statistics (run by the periodic maintenance). Autovacuum
        does this too, but only past its thresholds, and a profile's rows are a small part
        of shared tables: a search plan must not wait for that."""
        if not await self._as_owner([f"ANALYZE {t}" for t in ANALYZED], ANALYZED):
            log.info("planner statistics left to autovacuum: %s", NOT_OWNER)

    async def missing_embeddings(self: PgMemoryStore) -> int:
        if self.embedder is None:
            return 0
        async with self.db.reading():
            return int(
                await self.db.scalar(
                    "SELECT (SELECT count(*) FROM memories m WHERE status IN ('active', 'held')"
                    "  AND NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.memory_id = m.id"
                    "  AND e.model = $1))"
                    " + (SELECT count(*) FROM messages g WHERE NOT EXISTS (SELECT 1 FROM"
                    "  embeddings e WHERE e.message_id = g.id AND e.model = $1))",
                    (self.embedder.model,),
                )
            )
