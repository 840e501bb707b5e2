"""What the learning pipeline and the CLI ask of a server profile beyond the engine's
records, the same as the SQLite side's (memory/housekeeping.py)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from navi_desktop.memory.facts import MEMORY_COLUMNS
from navi_desktop.memory.models import Memory

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore


class PgHousekeepingOps:
    async def facts_by_key(
        self: PgMemoryStore, norm_key: str, status: str, *, reason: str | None = None
    ) -> list[Memory]:
        async with self.db.reading():
            rows = await self.db.fetchall(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE kind = 'fact' AND norm_key = $1"
                " AND status = $2 AND ($3::text IS NULL OR review_reason = $3) ORDER BY id DESC",
                (norm_key, status, reason),
            )
        return [Memory.from_row(r) for r in rows]

    async def session_attempts(self: PgMemoryStore, session_id: str) -> int:
        async with self.db.reading():
            value = await self.db.scalar(
                "SELECT attempts FROM sessions WHERE id = $1", (session_id,)
            )
        return int(value or 0)

    async def backup_if_due(self: PgMemoryStore) -> None:
        """The server's backups are its administrator's (pg_dump, base backups), not Navi's."""
        return None

    @asynccontextmanager
    async def processing(self: PgMemoryStore, session_id: str) -> AsyncIterator[bool]:
        """Claim the session for processing: False when another daemon holds it. An advisory
        lock held on a connection of its own while the session is processed, so a daemon that
        dies mid-way lets go of it with its connection."""
        digest = hashlib.blake2b(f"{self.user_id} {session_id}".encode(), digest_size=8)
        key = int.from_bytes(digest.digest(), "big", signed=True)  # a bigint lock key
        async with self.db.claim() as conn:
            got = await conn.fetchval("SELECT pg_try_advisory_lock($1)", key)
            try:
                yield bool(got)
            finally:
                if got:
                    await conn.execute("SELECT pg_advisory_unlock($1)", key)
