"""What a user typed while the memory server was unreachable, kept in a small local SQLite
file until the server is back, then replayed in order (pg/buffered.py)."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any

import sqlean

from navi_desktop.errors import NaviError, ProfileDamaged
from navi_desktop.memory.failures import translate
from navi_desktop.paths import UnsafePath, ensure_private_dir

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
    Each write is its own committed transaction with a full sync: it is acknowledged after.
    A file that cannot be used (a link, a folder, damaged, a full disk) raises one line
    naming it and the fix; nothing in it is changed then."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _exists(self) -> bool:
        try:
            os.lstat(self.path)  # a link, even a dangling one, is there (and refused)
        except FileNotFoundError:
            return False
        return True

    def _connect(self) -> sqlean.Connection:
        ensure_private_dir(self.path.parent)
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        conn = sqlean.connect(str(self.path), isolation_level=None)
        try:
            conn.row_factory = sqlean.Row
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA secure_delete = ON")  # a sent message leaves no copy behind
            conn.execute(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn

    def _run(self, sql: str, params: tuple[Any, ...] = (), *, create: bool = False) -> list[Any]:
        if not create and not self._exists():
            return []  # nothing was ever kept: no file is made just to read it
        try:
            conn = self._connect()
            try:
                return conn.execute(sql, params).fetchall()
            finally:
                conn.close()
        except (OSError, sqlean.Error) as exc:
            raise self._failure(exc) from exc

    def _failure(self, exc: BaseException) -> BaseException:
        """One line for a file or disk problem; anything else (a bug) as it is."""
        path = self.path
        if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
            with_target = f" (to {os.readlink(path)})" if os.path.islink(path) else ""
            return UnsafePath(
                f"refusing the outbox {path}: it is a symbolic link{with_target}; Navi keeps"
                " what you type while the memory server is away only in a real file of its"
                " own: remove the link (Navi makes a new outbox)"
            )
        error = translate(exc, path, opening=True)
        if isinstance(error, ProfileDamaged):
            return ProfileDamaged(
                f"the outbox {path} is damaged ({getattr(error, 'what', exc)}); it was left"
                " untouched and nothing was kept in it: move it aside (it may hold what you"
                " typed while the memory server was away) and Navi makes a new one"
            )
        if isinstance(error, NaviError):
            return error
        if isinstance(exc, OSError):
            return UnsafePath(f"cannot use the outbox {path}: {exc.strerror or exc}")
        return exc

    async def add(self, kind: str, session_id: str, **fields: Any) -> int:
        columns = ["kind", "session_id", *fields]
        rows = await asyncio.to_thread(
            self._run,
            f"INSERT INTO pending ({', '.join(columns)})"
            f" VALUES ({', '.join('?' * len(columns))}) RETURNING seq",
            (kind, session_id, *fields.values()),
            create=True,
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
