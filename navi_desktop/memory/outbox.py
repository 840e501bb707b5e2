"""What a user typed while the memory server was unreachable, kept in a small local SQLite
file until the server is back, then replayed in order (pg/buffered.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import sqlean

from navi_desktop.paths import ensure_private_dir

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pending (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('session', 'message')),
    session_id TEXT NOT NULL,
    title TEXT,
    role TEXT,
    name TEXT,
    content TEXT,
    meta TEXT,
    at TEXT NOT NULL
)
"""


class Outbox:
    """The pending writes of one profile, in order, in ``path`` (0600 in a 0700 folder).
    Each write is its own committed transaction with a full sync: it is acknowledged after."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _connect(self) -> sqlean.Connection:
        ensure_private_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        os.close(fd)
        conn = sqlean.connect(str(self.path), isolation_level=None)
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA secure_delete = ON")  # a sent message leaves no copy behind
        conn.execute(_SCHEMA)
        return conn

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        if not self.path.exists() and not sql.lstrip().upper().startswith("INSERT"):
            return []  # nothing was ever kept: no file is made just to read it
        conn = self._connect()
        try:
            conn.row_factory = sqlean.Row
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    async def add(self, kind: str, session_id: str, **fields: Any) -> int:
        columns = ["kind", "session_id", *fields]
        rows = await asyncio.to_thread(
            self._run,
            f"INSERT INTO pending ({', '.join(columns)})"
            f" VALUES ({', '.join('?' * len(columns))}) RETURNING seq",
            (kind, session_id, *fields.values()),
        )
        return int(rows[0][0])

    async def pending(self) -> list[Any]:
        return await asyncio.to_thread(self._run, "SELECT * FROM pending ORDER BY seq")

    async def count(self) -> int:
        rows = await asyncio.to_thread(self._run, "SELECT count(*) FROM pending")
        return int(rows[0][0]) if rows else 0

    async def messages_waiting(self) -> int:
        rows = await asyncio.to_thread(
            self._run, "SELECT count(*) FROM pending WHERE kind = 'message'"
        )
        return int(rows[0][0]) if rows else 0

    async def done(self, seq: int) -> None:
        """``seq`` reached the server; the file goes once nothing is left in it."""
        await asyncio.to_thread(self._run, "DELETE FROM pending WHERE seq = ?", (seq,))
        if not await self.count():
            for suffix in ("", "-journal", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
