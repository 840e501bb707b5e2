"""Looking at a profile's file before anything may write to it.

A file that is not ours, not whole, not readable or written by a newer Navi, emptied beside
backups that hold memories, or with another database's log beside it, is refused here, with
the reason and the fix, before a writing connection opens it: such a connection would create
the WAL beside it, switch its journal mode, run migrations on it, or replay that log into it.
"""

from __future__ import annotations

import os
import secrets
import stat
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import sqlean

from navi_desktop.errors import NaviError, ProfileForeign
from navi_desktop.fileio import kind
from navi_desktop.memory.failures import (
    damaged,
    emptied,
    foreign_log,
    linked,
    moved,
    not_a_file,
    not_yours,
    on_read_only_fs,
    os_failure,
    read_only_fs,
    translate,
    unreachable,
    unreadable,
)
from navi_desktop.memory.open_files import OPEN
from navi_desktop.memory.walcheck import scan

# PRAGMA application_id marks the file as ours ("NAVI"), so a foreign SQLite file is never touched.
APPLICATION_ID = 0x4E415649
# Run in every write transaction (db.py): rewriting the header's application id, unchanged,
# puts page 1, and with it the file's id (PRAGMA user_version), into each commit's log
# frames. A log of another Navi file then shows that file's id (check_log).
STAMP = f"PRAGMA application_id = {APPLICATION_ID}"
SQLITE_HEADER = b"SQLite format 3\x00"
HEADER_BYTES = 100
PROFILE_FILE = "memory.db"  # a profile's file, whose backups are in backups/ beside it

SchemaCheck = Callable[[sqlean.Connection, Path], None]


def wal_path(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def file_uri(path: Path) -> str:
    """SQLite's URI for ``path``, quoted from its bytes: a folder whose name is not UTF-8 (a
    home folder named in Latin-1) has no UTF-8 text, but SQLite opens the bytes it decodes."""
    return "file:" + urllib.parse.quote(os.fsencode(Path(path).absolute()))


Identity = tuple[int, int]  # (device, inode)


def identity(path: Path) -> Identity | None:
    """Which file is at ``path`` (device, inode; a link is its own file, never followed);
    None when nothing is. Other OS errors (a folder made unreadable) are raised."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_dev, st.st_ino)


def check_file(path: Path, *, writing: bool = True) -> int:
    """Refuse a file that exists but is not a whole SQLite file we may read (and, ``writing``,
    write), or is empty beside backups that hold memories; returns its size (0: absent or
    empty, a new memory). Reads at most its first 100 bytes."""
    _check_companions(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return 0
    except PermissionError:
        raise unreachable(path) from None
    except OSError as exc:
        raise os_failure(exc, path) from exc
    if stat.S_ISDIR(st.st_mode):
        raise not_a_file(path, "it is a folder, not a memory file")
    if not stat.S_ISREG(st.st_mode):
        raise not_a_file(path, "it is not a regular file")
    if st.st_size == 0:
        _refuse_emptied(path)
        return 0
    if _open_here(st):  # checked when it was opened; a plain open() here would cost its locks
        return st.st_size
    try:
        with path.open("rb") as fh:
            head = fh.read(HEADER_BYTES)
    except PermissionError:
        raise unreadable(path, _denied(st)) from None
    except OSError as exc:
        raise os_failure(exc, path) from exc
    if not os.access(path, os.R_OK | os.W_OK if writing else os.R_OK):
        if on_read_only_fs(path):  # no permission would help
            raise read_only_fs(path)
        raise unreadable(path, _denied(st))
    if len(head) < HEADER_BYTES and SQLITE_HEADER.startswith(head[:16]):
        raise damaged(path, f"truncated to {st.st_size} bytes")
    if head[:16] != SQLITE_HEADER:
        raise damaged(path, f"it is not a SQLite database: {_looks_like(head)}")
    page_size = _page_size(head)
    pages = _header_pages(head)
    wal = wal_path(path)
    has_wal = wal.exists() and wal.stat().st_size > 0
    # With a WAL, the file may lag behind its header until the next checkpoint.
    if pages and not has_wal and st.st_size < pages * page_size:
        raise damaged(
            path, f"truncated: {st.st_size} of the {pages * page_size} bytes its header announces"
        )
    return st.st_size


def _open_here(st: os.stat_result) -> bool:
    """Whether this process has the file open through SQLite (OPEN). Closing any
    descriptor of a file drops every POSIX lock the process holds on it, SQLite's too: a
    plain open() of it (a restore from a profile that is open, a backup's header check) would
    leave its readers and writers unseen by other processes."""
    return any(db.file_identity == (st.st_dev, st.st_ino) for db in list(OPEN))


def _page_size(head: bytes) -> int:
    size = int.from_bytes(head[16:18], "big")
    return 65536 if size == 1 else size


def _header_pages(head: bytes) -> int:
    """The file's size in pages as its header says, 0 when the header does not say it."""
    pages = int.from_bytes(head[28:32], "big")
    return pages if head[24:28] == head[92:96] else 0


def new_file_id() -> int:
    """A random id for a file's header (``PRAGMA user_version``): a new profile's, and each
    copy's, so that a log beside a file that shows another id is known as another file's."""
    return secrets.randbelow(2**31 - 1) + 1


def check_log(path: Path, conn: sqlean.Connection) -> None:
    """Refuse the log beside the file when it is another database's: SQLite would read that
    database's saves as this file's, and the next checkpoint would write them into it for
    good. ``conn``: a read-only connection through the log, not yet used.

    A log whose saves rewrite page 1 must show the file's id through it (``STAMP``); one
    whose saves do not (another tool's) cannot have grown or shrunk the file, so its commits
    must leave the file's size. A log of this file after a crash passes both."""
    try:
        size = os.stat(path).st_size
        log = scan(wal_path(path))  # SQLite locks no byte of the log itself: open() is safe
        # The file's own header, through SQLite, not open(): the process may have the file
        # open (the daemon's backup), and closing a descriptor of it would drop every POSIX
        # lock the process holds on it. SQLite keeps its own descriptors until then.
        own = _own_header(path)
    except FileNotFoundError:
        return  # moved away meanwhile: nothing of it is read
    except OSError as exc:
        raise os_failure(exc, path) from exc
    if own is None:
        return  # damaged, or new and empty: check_file and SQLite say so
    file_id, app_id, page_size, header_pages = own
    if log is None or not (log.sizes or log.page_one):
        return  # SQLite replays nothing of it
    if log.page_size != page_size:
        raise foreign_log(path, f"its pages are {log.page_size} bytes, the file's {page_size}")
    if not log.page_one:
        pages = -(-size // page_size)
        if not log.sizes <= {pages, header_pages or pages}:
            theirs = max(log.sizes - {pages})
            raise foreign_log(
                path, f"its saves are of a database of {theirs} pages, this file has {pages}"
            )
        return
    through = (
        conn.execute("PRAGMA user_version").fetchone()[0],
        conn.execute("PRAGMA application_id").fetchone()[0],
    )
    # A file made before ids (0) is only known by its application id.
    if app_id == APPLICATION_ID and through[1] != APPLICATION_ID:
        raise foreign_log(path, "its saves are of a database that is not a Navi memory file")
    if file_id and through[0] != file_id:
        raise foreign_log(path, "its saves are of a Navi memory file with another id")


def _own_header(path: Path) -> tuple[int, int, int, int] | None:
    """The file's id, application id, page size and size in pages as the file itself says,
    without its log (an immutable connection reads no log); None when SQLite cannot read it."""
    try:
        conn = sqlean.connect(f"{file_uri(path)}?mode=ro&immutable=1", uri=True)
    except sqlean.Error:
        return None
    try:
        values = [
            conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("user_version", "application_id", "page_size", "page_count")
        ]
    except sqlean.Error:
        return None
    finally:
        conn.close()
    return values[0], values[1], values[2], values[3]


def _refuse_emptied(path: Path) -> None:
    """Refuse an empty file beside backups that hold memories: a crash or a careless `: >`
    emptied it. Taken for a new profile, it got new saves, and the daily backups rotated the
    good ones out within days. (Navi makes a new file empty, and SQLite writes its first page
    when it switches it to WAL: a file killed between the two, with no such backup, is still
    a new one.)"""
    from navi_desktop.memory.backup import list_backups  # backup.py imports this module

    if path.name != PROFILE_FILE:  # backups/ holds that file's: the doctor's recovery,
        return  # beside it and made empty too, is no copy of them
    for backup in list_backups(path):
        if _holds_memories(backup):
            raise emptied(path, backup)


def _holds_memories(backup: Path) -> bool:
    try:
        conn = read_only(backup)
    except (sqlean.Error, NaviError):  # one that cannot be read is no reason to refuse
        return False
    try:
        return bool(conn.execute("SELECT EXISTS (SELECT 1 FROM memories)").fetchone()[0])
    except sqlean.Error:
        return False
    finally:
        conn.close()


def refuse_link(path: Path) -> None:
    """Refuse a symbolic link at a profile's file (a file the user names, such as a backup
    to restore, may be one)."""
    try:
        target = os.readlink(path)
    except OSError:
        return  # not a link (or nothing there): the other checks say what is wrong
    raise linked(path, target)


def refuse_others(path: Path) -> None:
    """Refuse a memory file, or its folder, that belongs to another user: its owner could read
    or replace what is saved there, and Navi could not make it private (a `chmod` of another
    user's folder is not permitted). It is left as it is, not taken over."""
    for item in (path.parent, path):
        try:
            owner = os.stat(item).st_uid
        except (FileNotFoundError, NotADirectoryError):
            continue  # made below, by the user
        except PermissionError:
            raise unreachable(path) from None
        except OSError as exc:
            raise os_failure(exc, path) from exc
        if owner != os.geteuid():
            raise not_yours(path, item, owner)


def _check_companions(path: Path) -> None:
    """SQLite opens the log and shared-memory files beside the memory file by name, and only
    ever makes them as plain files: anything else there (a named pipe made every write fail
    as a "disk I/O error"; a link would send the log elsewhere) was put there by someone else."""
    for side in (wal_path(path), path.with_name(path.name + "-shm")):
        try:
            mode = os.lstat(side).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except PermissionError:  # a folder on the way: the memory file is what the user named
            raise unreachable(path) from None
        except OSError as exc:
            raise os_failure(exc, side) from exc
        if not stat.S_ISREG(mode):
            raise not_a_file(path, f"{side.name} beside it is {kind(mode)}, not a file SQLite made")


def _denied(st: os.stat_result) -> str:
    return f"permission denied (mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid})"


def _looks_like(head: bytes) -> str:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return "its first bytes are not SQLite's (overwritten?)"
    if all(ch.isprintable() or ch.isspace() for ch in text):
        return "it holds text"
    return "its first bytes are not SQLite's (overwritten?)"


def read_only(
    path: Path, *, check_same_thread: bool = True, expect: Identity | None = None
) -> sqlean.Connection:
    """A connection that cannot write ``path`` nor create anything beside it: immutable when no
    WAL exists (nothing else has the file open in WAL mode), else read-only through the WAL,
    which must be the file's own (``check_log``). With ``expect``, see ``check_opened``."""
    _check_companions(path)  # a named pipe there blocked the log's check for good
    uri = file_uri(path)
    has_log = wal_path(path).exists()
    mode = "mode=ro" if has_log else "mode=ro&immutable=1"
    conn = sqlean.connect(
        f"{uri}?{mode}", uri=True, isolation_level=None, check_same_thread=check_same_thread
    )
    if expect is not None:
        check_opened(conn, path, expect)
    if has_log:
        try:
            check_log(path, conn)
        except BaseException:
            conn.close()
            raise
    conn.row_factory = sqlean.Row
    return conn


def check_opened(conn: sqlean.Connection, path: Path, expect: Identity) -> None:
    """Close ``conn`` and raise ``ProfileMoved`` unless the file at ``path`` is still
    ``expect``, the file its opener has open. SQLite opens the file at once but its log only
    at the first read, by name: a helper that opened a replacement while the old file's log
    still lay beside it would read that log as the new file's, and its close would copy the
    old file's pages into the new one. Called before any statement, so nothing was read."""
    try:
        now = identity(path)
    except OSError:
        now = None
    if now != expect:
        conn.close()
        raise moved(path, replaced=now is not None)


def probe(path: Path, check: SchemaCheck | None = None) -> None:
    """Read the file's schema without writing: refuse a foreign file, one a newer Navi wrote
    (``check``), or one SQLite finds malformed. A thread's work (blocking)."""
    try:
        conn = read_only(path)
    except sqlean.Error as exc:
        raise _failure(exc, path) from exc
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        has_tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
        if app_id not in (0, APPLICATION_ID) or (app_id == 0 and has_tables):
            raise ProfileForeign(
                f"{path} is a SQLite database but not a Navi memory file; it was left untouched:"
                " use another profile (--profile NAME), or move that file to where it belongs"
            )
        if check is not None:
            check(conn, path)
    except sqlean.Error as exc:
        raise _failure(exc, path) from exc
    finally:
        conn.close()


def _failure(exc: sqlean.Error, path: Path) -> NaviError:
    return translate(exc, path, opening=True) or damaged(path, str(exc))
