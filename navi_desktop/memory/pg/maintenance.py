"""Maintenance on the server: planner statistics, and the vectors written after the text
(float vectors; the file keeps int8 copies). Expiry, decay and recall are the file's code
(maintenance.FadingOps) on the server's database."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.documents import memory_text, message_text, text_digest
from navi_desktop.memory.facts import MEMORY_COLUMNS
from navi_desktop.memory.pg.scrub import NOT_OWNER
from navi_desktop.memory.sessions import MESSAGE_COLUMNS

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

    async def backfill_embeddings(
        self: PgMemoryStore, *, batch: int = 32, limit: int | None = None, messages: bool = True
    ) -> int:
        """Embed what has no vector for the current model (memories first, then messages unless
        ``messages`` is false); when nothing is left, drop vectors of earlier models. Returns
        how many texts were embedded."""
        if self.embedder is None:
            return 0
        model, done = self.embedder.model, 0
        targets = [
            (
                "memory_id",
                "memories",
                MEMORY_COLUMNS,
                memory_text,
                "status IN ('active', 'held') AND",
            ),
        ]
        if messages:
            targets.append(("message_id", "messages", MESSAGE_COLUMNS, message_text, ""))
        for column, table, columns, render, where in targets:
            while limit is None or done < limit:
                size = batch if limit is None else min(batch, limit - done)
                async with self.db.reading():
                    rows = await self.db.fetchall(
                        f"SELECT {columns} FROM {table} t WHERE {where} NOT EXISTS (SELECT 1"
                        f" FROM embeddings e WHERE e.{column} = t.id AND e.model = $1)"
                        " ORDER BY id LIMIT $2",
                        (model, size),
                    )
                if not rows:
                    break
                texts = [render(r) for r in rows]
                vectors = np.asarray(await self.embedder.embed(texts, query=False), np.float32)
                async with self.db.transaction():
                    # a row changed or gone while we embedded keeps no stale vector
                    now = await self.db.fetchall(
                        f"SELECT {columns} FROM {table} WHERE id = ANY($1::bigint[])",
                        ([r["id"] for r in rows],),
                    )
                    current = {r["id"]: render(r) for r in now}
                    await self.db.executemany(
                        f"INSERT INTO embeddings ({column}, model, dim, content_hash, vector,"
                        " created_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                        [
                            (r["id"], model, int(vec.shape[0]), text_digest(text), vec, now_iso())
                            for r, text, vec in zip(rows, texts, vectors, strict=True)
                            if current.get(r["id"]) == text
                        ],
                    )
                done += len(rows)
        if await self.missing_embeddings() == 0:  # every text has the current model's vector
            async with self.db.transaction():
                await self.db.execute("DELETE FROM embeddings WHERE model != $1", (model,))
        return done
