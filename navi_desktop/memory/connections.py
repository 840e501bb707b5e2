"""Connections to a profile's file: how each is opened, and the read-only ones searches
use side by side in worker threads."""

from __future__ import annotations

import asyncio
import os
import queue
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import sqlean
import sqlite_vec

from navi_desktop.memory.failures import damaged, translate
from navi_desktop.memory.filecheck import Identity, check_opened, file_uri
from navi_desktop.memory.filecheck import read_only as connect_read_only

T = TypeVar("T")
# The read connections map the whole file (SQLite maps no more than the file's size). At 1M
# memories (2 GB) a 1 GB map left half of a search's page reads to read() calls: reading
# 1,000 vectors took ~9 ms against ~7 ms with all of it mapped.
MMAP_BYTES = 1 << 40


def connect(path: Path, *, expect: Identity | None = None, **options: Any) -> sqlean.Connection:
    """A connection that never creates the file: only Database.open does (private, no link
    followed). A connection opened by name after the file was moved away made an empty one,
    readable by others, and took the old file's log for its own. With ``expect``, see
    ``check_opened``."""
    conn = sqlean.connect(f"{file_uri(path)}?mode=rw", uri=True, isolation_level=None, **options)
    if expect is not None:
        check_opened(conn, path, expect)
    return conn


def open_connection(
    path: Path,
    *,
    opening: bool = False,
    expect: Identity | None = None,
    read_only: bool = False,
) -> sqlean.Connection:
    """A connection with Navi's extensions and pragmas. ``read_only``: one that writes
    nothing, not even the switch to WAL (a file on a read-only disk, or not ours to write)."""
    try:
        if read_only:
            conn = connect_read_only(path, expect=expect, check_same_thread=False)
        else:
            conn = connect(path, expect=expect, check_same_thread=False)
    except sqlean.Error as exc:
        raise (translate(exc, path, opening=opening) or damaged(path, str(exc))) from exc
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
        if read_only:
            conn.execute("PRAGMA query_only = 1")
            return conn
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise damaged(path, f"cannot switch to WAL mode (got {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
    except sqlean.Error as exc:
        conn.close()
        raise (translate(exc, path, opening=opening) or damaged(path, str(exc))) from exc
    except BaseException:
        conn.close()
        raise
    return conn


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

    def __init__(
        self, path: Path, expect: Identity | None = None, *, read_only: bool = False
    ) -> None:
        self.path = path
        self.expect = expect  # the file they must open (check_opened)
        self.read_only = read_only  # the file is not to be written (see open_connection)
        self._idle: queue.SimpleQueue[sqlean.Connection] = queue.SimpleQueue()
        self._opened: list[sqlean.Connection] = []
        self._threads: ThreadPoolExecutor | None = None
        self._mapped: dict[sqlean.Connection, int] = {}  # the file's size at its last use

    async def run(self, work: Callable[[sqlean.Connection], T]) -> T:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.SIZE, thread_name_prefix="navi-read")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self._with_connection, work)

    def _with_connection(self, work: Callable[[sqlean.Connection], T]) -> T:
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:  # at most SIZE: there are that many threads
            conn = open_connection(self.path, expect=self.expect, read_only=self.read_only)
            if not self.read_only:  # (a read-only connection is query-only already)
                conn.execute("PRAGMA query_only = 1")
            # Pages are read through a memory map, not a read() call each: searches on a
            # large profile were ~15% faster. Shared with the OS page cache, not our heap.
            # (Not on the writing connection: saves were no faster, and their tail longer.)
            conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
            self._opened.append(conn)
        self._remap_if_shrunk(conn)
        try:
            return work(conn)
        finally:
            self._idle.put(conn)

    def _remap_if_shrunk(self, conn: sqlean.Connection) -> None:
        """A map is only as long as the file was when SQLite made it, and SQLite keeps it
        while the log says nothing changed. Reading a page of a map past the end of a file
        that another program cut short kills the process (SIGBUS); a read() call only comes
        back short, which SQLite reports as damage. So a file shorter than at this
        connection's last use is mapped again, to its new length."""
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return  # gone: Database.verify has said so, or will
        if size < self._mapped.get(conn, 0):
            conn.execute("PRAGMA mmap_size = 0")
            conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
        self._mapped[conn] = size

    def close(self) -> None:
        """Wait for running work, then close every connection (blocking: call in a thread)."""
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None
        for conn in self._opened:
            conn.close()
        self._opened.clear()
        self._mapped.clear()
        self._idle = queue.SimpleQueue()
