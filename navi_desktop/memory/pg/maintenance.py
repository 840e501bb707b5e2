"""Maintenance on the server: planner statistics, and how the embedding pass stores vectors
(float vectors; the file keeps int8 copies). Expiry, decay, recall and the embedding pass
itself are the file's code (maintenance.py) on the server's database."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.pg.free_space import NOT_OWNER, VacuumFailed

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
        try:
            if not await self._as_owner("ANALYZE", ANALYZED):
                log.info("planner statistics left to autovacuum: %s", NOT_OWNER)
        except VacuumFailed as exc:
            log.info("planner statistics left for later: %s", exc)

    async def _store_vectors(
        self: PgMemoryStore,
        column: str,
        owner_ids: list[int],
        hashes: list[str],
        vectors: np.ndarray,
    ) -> None:
        """Float vectors as pgvector's type (the server's index reads them as they are). A
        text's vector of the model replaces the one it had (its old text's); one of another
        size is another machine's, and stays (``shares_vectors``)."""
        assert self.embedder is not None
        model, when = self.embedder.model, now_iso()
        await self.db.executemany(
            f"INSERT INTO embeddings ({column}, model, dim, content_hash, vector, created_at)"
            f" VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT ({column}, model) WHERE {column} IS NOT NULL"
            " DO UPDATE SET content_hash = excluded.content_hash, vector = excluded.vector,"
            " created_at = excluded.created_at WHERE embeddings.dim = excluded.dim",
            [
                (owner_id, model, int(vec.shape[0]), digest, vec, when)
                for owner_id, digest, vec in zip(owner_ids, hashes, vectors, strict=True)
            ],
        )
