"""Opening a profile's SQLite file: sqlean + sqlite-vec under aiosqlite, pragmas, safety checks."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import sqlean
import sqlite_vec

from navi_desktop.errors import CorruptDatabase, NotFound
from navi_desktop.paths import ensure_private_dir

# PRAGMA application_id marks the file as ours ("NAVI"), so a foreign SQLite file is never touched.
APPLICATION_ID = 0x4E415649
SQLITE_HEADER = b"SQLite format 3\x00"
DbError = sqlean.Error


def _check_file(path: Path) -> None:
    """Refuse a file that exists but is not SQLite, before SQLite can write to it."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    try:
        with path.open("rb") as fh:
            header = fh.read(16)
    except OSError as exc:
        raise CorruptDatabase(f"cannot read memory file {path}: {exc.strerror}") from exc
    if header != SQLITE_HEADER:
        raise CorruptDatabase(
            f"{path} is not a SQLite database (corrupt or foreign file); it was left untouched:"
            " move it aside to start a new memory, or restore it from a backup"
        )


def _connector(path: Path) -> sqlean.Connection:
    conn = sqlean.connect(str(path), isolation_level=None, check_same_thread=False)
    try:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        conn.row_factory = sqlean.Row
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA foreign_keys = ON")
        # Deleted content is overwritten with zeros: forgetting must not leave the text behind.
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("PRAGMA temp_store = MEMORY")
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        has_tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
        if app_id not in (0, APPLICATION_ID) or (app_id == 0 and has_tables):
            raise CorruptDatabase(
                f"{path} is a SQLite database but not a Navi memory file; it was left untouched:"
                " choose another profile or move the file aside"
            )
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise CorruptDatabase(f"{path}: cannot switch to WAL mode (got {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
    except sqlean.DatabaseError as exc:
        conn.close()
        raise CorruptDatabase(
            f"{path} is damaged ({exc}); it was left untouched: restore it from a backup"
            " or move it aside to start a new memory"
        ) from exc
    except BaseException:
        conn.close()
        raise
    return conn


class Database:
    """One aiosqlite connection and a lock: a batch of writes is one uninterrupted transaction."""

    # Commits between checkpoints. SQLite's own auto-checkpoint runs inside the COMMIT that
    # crosses its threshold, stalling that write for milliseconds; ours runs on another
    # connection in a thread, so no write waits for it (PASSIVE never blocks writers).
    CHECKPOINT_EVERY = 200

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self.lock = asyncio.Lock()
        self._in_tx = False
        self._commits = 0
        self._checkpoint: asyncio.Task[None] | None = None
        self._reader: aiosqlite.Connection | None = None

    @classmethod
    async def open(cls, path: Path, *, create: bool = True) -> Database:
        path = Path(path)
        _check_file(path)
        if not path.exists():
            if not create:
                raise NotFound(f"no memory file at {path}")
            ensure_private_dir(path.parent)
            os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
        # Check in a plain thread first: a connector failing inside aiosqlite's worker thread
        # leaves that thread reporting to a loop that may be gone.
        await asyncio.to_thread(lambda: _connector(path).close())
        # Only a file known to be ours gets its permissions tightened.
        ensure_private_dir(path.parent)
        if path.stat().st_mode & 0o777 != 0o600:
            path.chmod(0o600)
        conn = aiosqlite.Connection(lambda: _connector(path), iter_chunk_size=64)
        await conn
        await conn.execute("PRAGMA wal_autocheckpoint = 0")
        return cls(conn, path)

    async def reader(self) -> aiosqlite.Connection:
        """A second, read-only connection: WAL lets it read while the main one writes, and
        searches run part of their work on it in parallel."""
        if self._reader is None:
            reader = aiosqlite.Connection(lambda: _connector(self.path), iter_chunk_size=64)
            await reader
            await reader.execute("PRAGMA query_only = 1")
            self._reader = reader
        return self._reader

    def _committed(self) -> None:
        self._commits += 1
        if self._commits >= self.CHECKPOINT_EVERY and (
            self._checkpoint is None or self._checkpoint.done()
        ):
            self._commits = 0
            self._checkpoint = asyncio.create_task(asyncio.to_thread(self._checkpoint_now))

    def _checkpoint_now(self) -> None:
        conn = sqlean.connect(str(self.path), isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout = 5000")
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlean.Error:
            pass  # the next checkpoint or close() catches up
        finally:
            conn.close()

    async def close(self) -> None:
        if self._checkpoint is not None:
            await self._checkpoint
        if self._reader is not None:
            await self._reader.close()
            self._reader = None
        async with self.lock:
            try:
                await self.conn.execute("PRAGMA optimize")
                await self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except DbError:
                pass
            await self.conn.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Database]:
        """BEGIN IMMEDIATE … COMMIT; any exception rolls the whole batch back."""
        async with self.lock:
            await self.conn.execute("BEGIN IMMEDIATE")
            self._in_tx = True
            try:
                yield self
            except BaseException:
                await self.conn.execute("ROLLBACK")
                raise
            else:
                await self.conn.execute("COMMIT")
                self._committed()
            finally:
                self._in_tx = False

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[Database]:
        """Serialise reads with writes on the single connection."""
        async with self.lock:
            yield self

    async def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        """Run a statement; returns lastrowid (for INSERT) or rowcount."""
        cur = await self.conn.execute(sql, params)
        try:
            return cur.lastrowid if sql.lstrip()[:6].upper() == "INSERT" else cur.rowcount
        finally:
            await cur.close()

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        await self.conn.executemany(sql, rows)

    async def fetchall(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        return list(await self.conn.execute_fetchall(sql, params))

    async def fetchone(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        rows = await self.conn.execute_fetchall(sql, params)
        return rows[0] if rows else None

    async def scalar(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        row = await self.fetchone(sql, params)
        return None if row is None else row[0]
