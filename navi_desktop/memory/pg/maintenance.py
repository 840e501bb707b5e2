"""Maintenance on the server: expiry, decay, use, planner statistics, missing embeddings.
The rules are the SQLite side's (maintenance.py: ``decay_step``); the statements are here."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from navi_desktop.memory.clock import check_iso, now_iso, parse_iso
from navi_desktop.memory.maintenance import DecayPolicy, DecayReport, decay_step
from navi_desktop.memory.pg.scrub import NOT_OWNER

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore

# What the periodic maintenance re-samples: the tables whose sizes steer the search plans.
log = logging.getLogger(__name__)
DEFAULT_POLICY = DecayPolicy()
ANALYZED = ("memories", "messages", "embeddings", "entities", "entity_links", "memory_history")


class PgMaintenanceOps:
    async def touch(self: PgMemoryStore, memory_ids: list[int]) -> None:
        """Memories were used (put into a prompt): recall strengthens them."""
        if not memory_ids:
            return
        async with self.db.transaction():
            await self.db.execute(
                "UPDATE memories SET last_used_at = $1, strength = 1.0"
                " WHERE id = ANY($2::bigint[])",
                (now_iso(), list(memory_ids)),
            )

    async def archive_expired(self: PgMemoryStore, *, now: str | None = None) -> list[int]:
        """Archive (never delete) the current facts whose expiry has passed, pinned ones too;
        each gets a history row saying why."""
        when = check_iso(now, "now") if now else now_iso()
        async with self.db.transaction():
            rows = await self.db.fetchall(
                "SELECT id, status, expires_at FROM memories WHERE expires_at IS NOT NULL"
                " AND expires_at <= $1 AND status IN ('active', 'held') ORDER BY id FOR UPDATE",
                (when,),
            )
            for row in rows:
                await self._archive_quietly(
                    row,
                    "system",
                    {"status": "archived", "reason": "it expired", "expires_at": row["expires_at"]},
                )
            if rows:
                await self._mark_profile_stale()
        return [r["id"] for r in rows]

    async def decay(
        self: PgMemoryStore, *, now: str | None = None, policy: DecayPolicy = DEFAULT_POLICY
    ) -> DecayReport:
        """Archive what expired, then let the rest fade along the forgetting curve."""
        when = parse_iso(now or now_iso())
        report = DecayReport(archived=await self.archive_expired(now=now))
        async with self.db.transaction():
            rows = await self.db.fetchall(
                "SELECT id, mentions, strength, coalesce(last_used_at, updated_at) AS seen"
                " FROM memories WHERE kind = 'fact' AND status = 'active' AND pinned = 0"
                " FOR UPDATE"
            )
            faded: list[tuple[float, int]] = []
            for row in rows:
                step, retention = decay_step(row, when, policy)
                if step == "archive":
                    await self._archive_quietly(
                        row, "decay", {"status": "archived", "strength": retention}, retention
                    )
                    report.archived.append(row["id"])
                elif step == "fade":
                    faded.append((retention, row["id"]))
            await self.db.executemany("UPDATE memories SET strength = $1 WHERE id = $2", faded)
            report.updated = len(faded)
            if report.archived:
                await self._mark_profile_stale()
        return report

    async def _archive_quietly(
        self: PgMemoryStore,
        row: Any,
        actor: str,
        new: dict[str, Any],
        strength: float | None = None,
    ) -> None:
        """Archive a memory nobody asked to (an expiry, decay), its history saying why."""
        await self.db.execute(
            "UPDATE memories SET status = 'archived', strength = coalesce($1, strength),"
            " updated_at = $2 WHERE id = $3",
            (strength, now_iso(), row["id"]),
        )
        old = {"status": row.get("status", "active")}
        await self._history(row["id"], "archive", actor, old=old, new=new)

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
