"""Opening a profile's SQLite file: sqlean + sqlite-vec under aiosqlite, pragmas, safety checks."""

from __future__ import annotations

import asyncio
import os
import queue
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import sqlean
import sqlite_vec

from navi_desktop.errors import CorruptDatabase, NotFound
from navi_desktop.paths import ensure_private_dir

# PRAGMA application_id marks the file as ours ("NAVI"), so a foreign SQLite file is never touched.
APPLICATION_ID = 0x4E415649
SQLITE_HEADER = b"SQLite format 3\x00"
DbError = sqlean.Error
MMAP_BYTES = 1 << 30
T = TypeVar("T")


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

    # Commits, or rows changed, between checkpoints. SQLite's own auto-checkpoint runs inside
    # the COMMIT that crosses its threshold, stalling that write for milliseconds; ours runs
    # on another connection in a thread, so no write waits for it (PASSIVE never blocks
    # writers). Counting rows bounds the log after bulk writes (an import, a re-embedding):
    # 200 commits of 1,000 vectors left a log of hundreds of MB, and reads of pages in the
    # log are slower than reads of the memory-mapped file.
    CHECKPOINT_EVERY = 200
    CHECKPOINT_CHANGES = 20_000

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self.lock = asyncio.Lock()
        self._in_tx = False
        self._commits = 0
        self._changes_at_checkpoint = 0
        self._checkpoint: asyncio.Task[None] | None = None
        self._readers = ReadPool(path)

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
        # Planner statistics for tables that have none or have grown, as SQLite advises for
        # long-lived connections; sampled (analysis_limit), so a few ms even at 100k rows.
        # Without them a search's joins could pick a scan over a lookup.
        await conn.execute("PRAGMA analysis_limit = 400")
        await conn.execute("PRAGMA optimize = 0x10002")
        return cls(conn, path)

    async def read(self, work: Callable[[sqlean.Connection], T]) -> T:
        """Run ``work(connection)`` on a read-only connection in a worker thread; see ReadPool."""
        return await self._readers.run(work)

    def _committed(self) -> None:
        self._commits += 1
        changes = self.conn.total_changes - self._changes_at_checkpoint
        due = self._commits >= self.CHECKPOINT_EVERY or changes >= self.CHECKPOINT_CHANGES
        if due and (self._checkpoint is None or self._checkpoint.done()):
            self._commits = 0
            self._changes_at_checkpoint = self.conn.total_changes
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
        await asyncio.to_thread(self._readers.close)
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
        # Not closed: closing costs another round trip to the SQLite thread, and a statement
        # without result rows is finished once executed; the cursor goes with its last reference.
        return cur.lastrowid if sql.lstrip()[:6].upper() == "INSERT" else cur.rowcount

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        await self.conn.executemany(sql, rows)

    async def pipeline(self, *steps: Awaitable[T]) -> list[T]:
        """Await statements queued back to back: the SQLite thread runs them in this order
        without a round trip to the event loop between them. Every step runs even when an
        earlier one fails; the first failure is raised (roll the transaction back)."""
        # gather starts its tasks in order, and each queues its statement on its first step.
        results = await asyncio.gather(*steps, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results  # type: ignore[return-value]

    async def fetchall(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        return list(await self.conn.execute_fetchall(sql, params))

    async def fetchone(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        rows = await self.conn.execute_fetchall(sql, params)
        return rows[0] if rows else None

    async def scalar(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        row = await self.fetchone(sql, params)
        return None if row is None else row[0]


class ReadPool:
    """Read-only connections, each used by one worker thread at a time.

    A search runs its signals here side by side. As chains of awaits on the event loop they
    barely overlapped: each step of one waited while another held the loop with numpy work.
    A plain function per signal runs its queries back to back, and SQLite and numpy release
    the GIL while they work. WAL lets these connections read while the main one writes.
    """

    # One per search signal, but no more than the cores: on two, a third thread made each
    # signal wait longer than it saved.
    SIZE = max(1, min(3, os.cpu_count() or 1))

    def __init__(self, path: Path) -> None:
        self.path = path
        self._idle: queue.SimpleQueue[sqlean.Connection] = queue.SimpleQueue()
        self._opened: list[sqlean.Connection] = []
        self._threads: ThreadPoolExecutor | None = None

    async def run(self, work: Callable[[sqlean.Connection], T]) -> T:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.SIZE, thread_name_prefix="navi-read")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self._with_connection, work)

    def _with_connection(self, work: Callable[[sqlean.Connection], T]) -> T:
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:  # at most SIZE: there are that many threads
            conn = _connector(self.path)
            conn.execute("PRAGMA query_only = 1")
            # Pages are read through a memory map, not a read() call each: searches on a
            # large profile were ~15% faster. Shared with the OS page cache, not our heap.
            # (Not on the writing connection: saves were no faster, and their tail longer.)
            conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
            self._opened.append(conn)
        try:
            return work(conn)
        finally:
            self._idle.put(conn)

    def close(self) -> None:
        """Wait for running work, then close every connection (blocking: call in a thread)."""
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None
        for conn in self._opened:
            conn.close()
        self._opened.clear()
        self._idle = queue.SimpleQueue()
