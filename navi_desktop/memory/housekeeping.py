"""What the learning pipeline and the CLI ask of a profile's file beyond the engine's records:
facts by key, a session's failed attempts, the daily backup, claiming a session end, and
compacting the file. The server store answers the same (pg/store.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from navi_desktop.memory.db import DbError
from navi_desktop.memory.models import Memory

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore


class HousekeepingOps:
    async def facts_by_key(
        self: MemoryStore, norm_key: str, status: str, *, reason: str | None = None
    ) -> list[Memory]:
        """Facts with this key and status (and review reason), newest first."""
        async with self.db.reading():
            rows = await self.db.fetchall(
                "SELECT * FROM memories WHERE kind = 'fact' AND norm_key = ? AND status = ?"
                " AND (? IS NULL OR review_reason = ?) ORDER BY id DESC",
                (norm_key, status, reason, reason),
            )
        return [Memory.from_row(r) for r in rows]

    async def session_attempts(self: MemoryStore, session_id: str) -> int:
        """How many times processing the session failed before."""
        async with self.db.reading():
            value = await self.db.scalar(
                "SELECT attempts FROM sessions WHERE id = ?", (session_id,)
            )
        return int(value or 0)

    async def backup_if_due(self: MemoryStore) -> Any:
        return await self.db.backup_if_due()

    @asynccontextmanager
    async def processing(self: MemoryStore, session_id: str) -> AsyncIterator[bool]:
        """Whether this process may process the session now: always, as the daemon's lock
        on the folder makes it the file's only writer (a server store claims it)."""
        yield True

    async def compact(self: MemoryStore) -> dict[str, Any]:
        """Rewrite the file without its free pages (VACUUM): after a forget, no page that
        once held the text is left, even zeroed; the sizes before and after, in bytes."""

        def size() -> int:  # the file and its write-ahead log
            wal = self.path.with_name(self.path.name + "-wal")
            return sum(p.stat().st_size for p in (self.path, wal) if p.exists())

        before = size()
        async with self.db.lock:
            self.db.verify()
            try:
                await self.db.conn.execute("VACUUM")
                await self.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except DbError as exc:
                raise self.db._failure(exc) from exc
        return {"bytes_before": before, "bytes_after": size()}
