"""Opening a profile's SQLite file: sqlean + sqlite-vec under aiosqlite, pragmas, safety checks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import sqlean

from navi_desktop.errors import DiskError, NaviError, NotFound, ProfileMoved
from navi_desktop.memory.connections import ReadPool, connect, open_connection
from navi_desktop.memory.failures import (
    moved,
    not_set_up,
    on_read_only_fs,
    os_failure,
    translate,
)
from navi_desktop.memory.filecheck import (
    APPLICATION_ID,
    SQLITE_HEADER,
    STAMP,
    Identity,
    SchemaCheck,
    check_file,
    identity,
    probe,
    refuse_link,
    refuse_others,
    wal_path,
)
from navi_desktop.memory.open_files import OPEN
from navi_desktop.paths import ensure_private_dir

__all__ = ["APPLICATION_ID", "SQLITE_HEADER", "Database", "DbError", "ReadPool"]

DbError = sqlean.Error
log = logging.getLogger(__name__)
T = TypeVar("T")


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
    # A passive checkpoint never catches up with a stream of commits (a bulk import): the log
    # grew to 3.4 GB by 350k memories, and every read slowed with it. Past this size the next
    # checkpoint waits for the writer (once) and empties the log.
    CHECKPOINT_TRUNCATE_BYTES = 64 << 20
    # How often a write looks whether the daily backup is due (a folder listing).
    BACKUP_CHECK_S = 3600.0

    def __init__(
        self,
        conn: aiosqlite.Connection,
        path: Path,
        opened: Identity | None = None,
        *,
        read_only: bool = False,
    ) -> None:
        """``opened``: the identity of the file ``conn`` has open (else the one at ``path``);
        ``read_only``: ``conn`` and the readers write nothing (see ``open``)."""
        self.conn = conn
        self.path = path
        self.read_only = read_only
        self.lock = asyncio.Lock()
        self._in_tx = False
        self._held = False  # under reading(), which has called verify()
        self._commits = 0
        self._changes_at_checkpoint = 0
        self._checkpoint: asyncio.Task[None] | None = None
        # The file this connection has open; see verify(). Helpers must open the same one.
        self._identity = opened or identity(path)
        self._readers = ReadPool(path, self._identity, read_only=read_only)
        self._gone: ProfileMoved | None = None
        self._closed = False
        OPEN.add(self)
        # The log and its index this connection has open (note_log_files), by identity.
        self.log_files: dict[Path, tuple[int, int] | None] = {}
        # Commits made through this connection: none means read-only use (incognito).
        self.commits = 0
        # Set by the daemon: how many daily backups to keep (0: none); see backup.py.
        self.backups: Callable[[], int] | None = None
        self._backup: asyncio.Task[Any] | None = None
        self._backup_checked = float("-inf")

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        create: bool = True,
        check: SchemaCheck | None = None,
        read_only: bool = False,
    ) -> Database:
        """Open (by default creating) the file. A file that is not a whole Navi file this
        version can use (``check`` looks at its schema) raises a ``ProfileError`` before
        anything is written to it or created beside it. ``read_only``: open a file that exists
        only to read it, writing nothing to it or beside it (a read-only disk)."""
        path = Path(path)
        refuse_link(path)
        if read_only:
            return await cls._open_read_only(path, check)
        if check_file(path):
            await asyncio.to_thread(probe, path, check)
        refuse_others(path)
        # Only a file known to be ours (probed, or new) gets its permissions tightened; before
        # SQLite opens it, so that its log is created with the same mode.
        new = not path.exists()
        if new and not create:
            raise NotFound(f"no memory file at {path}")
        try:
            ensure_private_dir(path.parent)
            if new:
                os.close(os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600))
            if path.stat().st_mode & 0o777 != 0o600:  # (a umask may take more than 0o077)
                path.chmod(0o600)
        except OSError as exc:
            raise os_failure(exc, path, opening=True) from exc
        return await cls._connect(path)

    @classmethod
    async def _open_read_only(cls, path: Path, check: SchemaCheck | None) -> Database:
        if not check_file(path, writing=False):
            if path.exists():  # empty: a new profile, which cannot be set up here
                raise not_set_up(path)
            raise NotFound(f"no memory file at {path}")
        shm = path.with_name(path.name + "-shm")
        if wal_path(path).exists() and not shm.exists() and on_read_only_fs(path):
            raise DiskError(
                f"cannot read {path}: its log {wal_path(path).name} holds saves not yet in it,"
                f" and reading them needs {shm.name} beside it, which a read-only file system"
                " cannot have made; nothing was changed: mount it read-write again"
            )
        await asyncio.to_thread(probe, path, check)
        return await cls._connect(path, read_only=True)

    @classmethod
    async def _connect(cls, path: Path, *, read_only: bool = False) -> Database:
        """The connection to the file just checked, which must still be the one at ``path``."""
        checked = identity(path)
        if checked is None:
            raise moved(path, replaced=False)
        # Opened in a plain thread, then handed to aiosqlite's: a connector failing inside
        # aiosqlite's worker thread leaves that thread reporting to a loop that may be gone.
        opened = await asyncio.to_thread(
            open_connection, path, opening=True, expect=checked, read_only=read_only
        )
        conn = aiosqlite.Connection(lambda: opened, iter_chunk_size=64)
        await conn
        if not read_only:  # checkpoints are ours (see CHECKPOINT_EVERY)
            await conn.execute("PRAGMA wal_autocheckpoint = 0")
        return cls(conn, path, checked, read_only=read_only)

    def verify(self) -> None:
        """Raise ``ProfileMoved`` once the file at the path is not the one open here (another
        program moved, deleted or replaced it). Writing on would put saves where nobody looks
        (into a deleted file), and a connection opened by name would read the new file
        through the old one's log. A stat call: cheap enough for every statement."""
        if self._closed:  # a caller still holding it after the daemon closed it
            raise NaviError(f"{self.path} was closed while in use; try again")
        if self._gone is None:
            try:
                now = identity(self.path)
            except OSError as exc:
                raise os_failure(exc, self.path) from exc
            if now == self._identity:
                return
            self._gone = moved(self.path, replaced=now is not None)
            log.warning("%s", self._gone)
        raise ProfileMoved(str(self._gone))  # a new instance: tracebacks do not pile up

    @property
    def file_identity(self) -> Identity | None:
        """The file this connection has open (device, inode), as it was at the open."""
        return self._identity

    def note_log_files(self) -> None:
        """Remember which log files are this file's (made by its first transaction): once
        the file is moved away, only those are removed from the path (replace_moved)."""
        for suffix in ("-wal", "-shm"):
            log_file = self.path.with_name(self.path.name + suffix)
            self.log_files[log_file] = identity(log_file)

    def moved_away(self) -> bool:
        """Whether verify() would raise (the daemon then closes this and opens the path)."""
        try:
            self.verify()
        except ProfileMoved:
            return True
        except NaviError:
            return False
        return False

    async def analyze(self) -> None:
        """Planner statistics for tables that have none or have grown, as SQLite advises for
        long-lived connections; sampled (analysis_limit), so a few ms even at 100k rows.
        Without them a search's joins could pick a scan over a lookup. Skipped on a full
        disk: statistics are not worth failing an open for."""
        try:
            await self.conn.execute("PRAGMA analysis_limit = 400")
            await self.conn.execute("PRAGMA optimize = 0x10002")
        except DbError as exc:
            if translate(exc, self.path) is None:
                raise

    def _failure(self, exc: BaseException) -> BaseException:
        """What to raise for a SQLite error: a full disk, an I/O error or damage as the
        user's error (see failures.py); anything else as it is."""
        return translate(exc, self.path) or exc

    async def read(self, work: Callable[[sqlean.Connection], T]) -> T:
        """Run ``work(connection)`` on a read-only connection in a worker thread; see ReadPool."""
        self.verify()
        try:
            return await self._readers.run(work)
        except DbError as exc:
            raise self._failure(exc) from exc

    def _committed(self) -> None:
        self.commits += 1
        self._commits += 1
        changes = self.conn.total_changes - self._changes_at_checkpoint
        due = self._commits >= self.CHECKPOINT_EVERY or changes >= self.CHECKPOINT_CHANGES
        if due and (self._checkpoint is None or self._checkpoint.done()):
            self._commits = 0
            self._changes_at_checkpoint = self.conn.total_changes
            self._checkpoint = asyncio.create_task(asyncio.to_thread(self._checkpoint_now))
        now = time.monotonic()
        if self.backups is not None and now - self._backup_checked >= self.BACKUP_CHECK_S:
            self._backup_checked = now
            self._start_backup()

    def _start_backup(self) -> asyncio.Task[Any]:
        """The one task that makes the daily backup: a forget's or a delete's pass over the
        copies, and a close, wait for it (see ``_backup``), whoever asked for it."""
        if self._backup is None or self._backup.done():
            self._backup = asyncio.create_task(self._backup_if_due())
        return self._backup

    async def backup_if_due(self) -> Any:
        """The rolling daily backup (backup.py), in a thread: when the daemon set a count,
        something was written through this connection, and none was made in the last day.
        Never raises: a backup that cannot be made is logged and tried again later."""
        return await self._start_backup()

    async def _backup_if_due(self) -> Any:
        keep = self.backups() if self.backups is not None else 0
        if keep <= 0 or self.commits == 0 or self.moved_away():
            return None
        from navi_desktop.memory.backup import take_daily

        try:
            return await asyncio.to_thread(take_daily, self.path, keep, expect=self._identity)
        except Exception as exc:  # logged; the next check tries again
            log.warning("daily backup of %s not made: %s", self.path, exc)
            return None

    def _checkpoint_now(self) -> None:
        if self.moved_away():
            return
        try:
            conn = connect(self.path, expect=self._identity)
        except (sqlean.Error, ProfileMoved):
            return  # the next checkpoint or close() catches up, or the daemon lets it go
        try:
            conn.execute("PRAGMA busy_timeout = 5000")
            wal = Path(f"{self.path}-wal")
            big = wal.exists() and wal.stat().st_size > self.CHECKPOINT_TRUNCATE_BYTES
            conn.execute(f"PRAGMA wal_checkpoint({'TRUNCATE' if big else 'PASSIVE'})")
        except sqlean.Error:
            pass  # the next checkpoint or close() catches up
        finally:
            conn.close()

    async def close(self) -> None:
        await self.settle()
        async with self.lock:
            if not self.read_only:  # a file only read has nothing to tidy
                with contextlib.suppress(DbError):
                    await self.conn.execute("PRAGMA optimize")
                    await self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            await self.conn.close()
            OPEN.discard(self)

    async def settle(self) -> None:
        """Take no more work, and wait for what runs beside the connection (a checkpoint, the
        daily backup, the readers) to finish: each holds the file open."""
        self._closed = True
        if self._checkpoint is not None:
            await self._checkpoint
        if self._backup is not None:
            await self._backup
        await asyncio.to_thread(self._readers.close)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Database]:
        """BEGIN IMMEDIATE … COMMIT; any exception rolls the whole batch back."""
        async with self.lock:
            self.verify()
            try:
                await self.conn.execute("BEGIN IMMEDIATE")
            except DbError as exc:
                raise self._failure(exc) from exc
            self._in_tx = True
            changes = self.conn.total_changes
            try:
                yield self
                if self.conn.total_changes != changes:  # a commit that logs pages: its id too
                    await self.conn.execute(STAMP)  # (filecheck); one that changed no row
                await self.conn.execute("COMMIT")  # logs none, and needs no 4 KB page 1
            except BaseException as exc:
                await self._rollback()
                if isinstance(exc, DbError) and (failure := self._failure(exc)) is not exc:
                    raise failure from exc
                raise
            else:
                self._committed()
            finally:
                self._in_tx = False

    async def _rollback(self) -> None:
        """Undo the open transaction. After a full disk or an I/O error SQLite may have
        rolled it back itself; a second ROLLBACK would hide the first error."""
        if self.conn.in_transaction:
            # The transaction is gone either way: nothing of it was kept.
            with contextlib.suppress(DbError):
                await self.conn.execute("ROLLBACK")

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[Database]:
        """Serialise reads with writes on the single connection."""
        async with self.lock:
            self.verify()
            self._held = True
            try:
                yield self
            finally:
                self._held = False

    async def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        """Run a statement; returns the rows it touched (an id: INSERT ... RETURNING id)."""
        if not (self._in_tx or self._held):  # else checked at the start of it
            self.verify()
        try:
            cur = await self.conn.execute(sql, params)
        except DbError as exc:
            raise self._failure(exc) from exc
        # Not closed: closing costs another round trip to the SQLite thread, and a statement
        # without result rows is finished once executed. One with rows left unread (a PRAGMA
        # that answers) stays running until closed, and VACUUM refuses to run beside it.
        if cur.description is not None:
            await cur.close()
        return cur.rowcount

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        if not (self._in_tx or self._held):  # else checked at the start of it
            self.verify()
        try:
            await self.conn.executemany(sql, rows)
        except DbError as exc:
            raise self._failure(exc) from exc

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
        if not (self._in_tx or self._held):  # else checked at the start of it
            self.verify()
        try:
            return list(await self.conn.execute_fetchall(sql, params))
        except DbError as exc:
            raise self._failure(exc) from exc

    async def fetchone(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def scalar(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        row = await self.fetchone(sql, params)
        return None if row is None else row[0]
