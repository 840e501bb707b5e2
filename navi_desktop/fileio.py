"""Writing a user's file so that a crash never leaves half of it, and reading one that may
not be what its name says."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import math
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from navi_desktop.file_swap import put_if_unchanged
from navi_desktop.stopping import removed_on_stop, stopped_by_signals

log = logging.getLogger(__name__)
# A copy of the user's memories is written beside its file as ".<name>.<mark><8 random>.tmp"
# (with SQLite's "-journal" beside it), then renamed over it or linked into place: one a
# killed writer left holds the memories, so the next writer into that folder removes it
# (``writing_in``), whatever folder the user named.
EXPORT_TMP = "navi-export-"  # an export
COPY_TMP = "navi-copy-"  # a backup, or the copy a restore puts in place (copy_database)
_LEFT = re.compile(rf"^\..+\.({EXPORT_TMP}|{COPY_TMP})[a-z0-9_]{{8}}\.tmp(?:-journal)?$")
_LEFT_BY = {EXPORT_TMP: "a stopped export", COPY_TMP: "a stopped backup or restore"}
# Where folder locks are not to be had (NFS): a temporary file this old has no writer left (a
# writer changes it page after page; a restore's whole stay is seconds to minutes).
STALE_TMP_S = 3600
# How long a writer waits for a folder's lock: a cleaner holds it alone only for a moment.
FOLDER_LOCK_WAIT_S = 2.0
# How often a lock another holds is tried again, by default (take_lock).
LOCK_POLL_S = 0.05

# What stands at a path, for messages ("it is a named pipe, not a socket").
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISREG, "a regular file"),
)


def kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class NotRegularFile(OSError):
    """A path that holds a folder, a named pipe or a device where a file was expected."""


def nothing_at(path: Path) -> bool:
    """Nothing at ``path`` (a link is something). Anything else, an unreadable folder or a
    file where a folder goes too, is for whoever opens it to report in its own words."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def open_regular(path: Path, flags: int = os.O_RDONLY) -> int:
    """A descriptor for the regular file at ``path``. Opened without blocking and checked on
    the descriptor itself: a named pipe planted at the path would hold the reader forever, and
    a link to /dev/zero would fill its memory. Raises ``NotRegularFile`` for anything else."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            raise NotRegularFile(errno.EINVAL, f"it is {what}", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def take_lock(
    fd: int, how: int, *, wait_s: float | None = None, poll_s: float = LOCK_POLL_S
) -> bool:
    """Take the advisory lock (``flock``) of the file or folder open at ``fd``, ``how``
    (``LOCK_EX`` or ``LOCK_SH``): without ``wait_s``, waited for as long as it takes; with
    it, tried every ``poll_s`` for up to ``wait_s`` seconds, never blocking (0: once). True
    once held; False where the file system has no such locks (the caller goes on without);
    ``BlockingIOError`` while another still holds it at the end."""
    if wait_s is None:
        try:
            fcntl.flock(fd, how)
        except OSError:
            return False
        return True
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(poll_s)
        except OSError:
            return False
        else:
            return True


@contextlib.contextmanager
def locked(
    fd: int, *, wait_s: float | None = None, poll_s: float = LOCK_POLL_S, strict: bool = False
) -> Iterator[bool]:
    """Hold the advisory lock of the file open at ``fd``, alone, while inside (``take_lock``;
    whether it is held comes out). The daemon writes each log line under it and a scrub or a
    trim holds it from reading a log to truncating it, so no line lands in between (it was
    lost). Per open file: a thread of the daemon that opened the log itself waits as another
    process does. On a file system without locks, or past ``wait_s``, the work is done
    without it; ``strict``: past ``wait_s``, ``BlockingIOError`` and the work is not done."""
    try:
        held = take_lock(fd, fcntl.LOCK_EX, wait_s=wait_s, poll_s=poll_s)
    except BlockingIOError:
        if strict:
            raise
        held = False
    try:
        yield held
    finally:
        if held:
            fcntl.flock(fd, fcntl.LOCK_UN)


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (see ``open_regular``), at most ``limit``:
    a larger one raises ``OSError(EFBIG)`` before any of it is read."""
    with os.fdopen(open_regular(path), "rb") as handle:
        if os.fstat(handle.fileno()).st_size > limit:
            raise OSError(errno.EFBIG, f"it is larger than {limit:,} bytes", str(path))
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while being read
        raise OSError(errno.EFBIG, f"it is larger than {limit:,} bytes", str(path))
    return data


def temp_name_base(path: Path, extra: int) -> str:
    """``path``'s name, cut (at a character) so that a temporary file's name made of it and
    ``extra`` more bytes (``.<name>.<mark><random>.tmp``) fits its folder: whatever name the
    folder takes for ``path`` can be written through one. Raises as ``name_max`` does."""
    name, most = path.name, name_max(path)
    while len(os.fsencode(name)) + extra > most:
        name = name[:-1]
    return name


def name_max(path: Path) -> int:
    """The most bytes a name in ``path``'s folder may have (NAME_MAX); ``OSError`` that names
    ``path``, not a temporary file beside it, where its own name has more."""
    try:
        most = os.pathconf(path.parent, "PC_NAME_MAX")
    except (OSError, ValueError):  # a folder not there yet, or a system that does not say
        most = 255
    size = len(os.fsencode(path.name))
    if size > most:
        reason = f"its name is {size} bytes; the file system takes at most {most}"
        raise OSError(errno.ENAMETOOLONG, f"{reason}: give a shorter name", str(path))
    return most


def write_private_atomic(
    path: Path, text: str, *, tag: str = "", check: Callable[[Path], None] | None = None
) -> None:
    """Write ``text`` through a temp file in the same folder, fsync, rename it over ``path``
    and fsync the folder: readers see the old file or the new one, never half. Mode 0600.
    ``tag``: a mark in the temp file's name (``.<name>.<tag><random>.tmp``, ``<name>`` cut
    where the whole would be too long a name). ``check``: given the file that ``path``
    held, raises if another program changed it meanwhile; ``path`` then holds that program's
    file (``put_if_unchanged``)."""
    name = temp_name_base(path, len(os.fsencode(f"..{tag}.tmp")) + 8)  # 8: mkstemp's random
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{name}.{tag}", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle, removed_on_stop(tmp):
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
            os.chmod(tmp, 0o600)
            if check is None:
                os.replace(tmp, path)
            else:
                put_if_unchanged(tmp, path, check)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_user_file(path: Path, text: str) -> bool:
    """Write an export where the user said. A regular file (or none) is written whole or not
    at all (``write_private_atomic``); through a link, the file it points to, so the link
    stays a link. A pipe or a terminal (``-o /dev/stdout``, ``-o >(gzip > f.gz)``) is
    written into, never replaced: a rename over it replaced a device node with a file. A disk
    device is refused: an export would overwrite the disk. True when it went into a stream
    (then a message meant for the terminal must not go there too)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode  # through links: /dev/stdout is one to the real thing
    except FileNotFoundError:
        mode = stat.S_IFREG
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            name_max(path)  # its own name too long: said so, by its name
        raise
    if stat.S_ISREG(mode):
        _write_export(path.resolve() if path.is_symlink() else path, text)
        return False
    if stat.S_ISBLK(mode):
        raise OSError(errno.EINVAL, "it is a disk device", str(path))
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "it is a folder", str(path))
    _write_into(path, text)
    return True


def _write_into(path: Path, text: str) -> None:
    """Write ``text`` into a pipe, socket or character device. Opened without blocking, so a
    pipe nobody reads is an error (ENXIO), not a wait without end; then writes block as
    usual, so a slow reader is waited for."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OSError(errno.ENXIO, "it is a named pipe that nothing reads", str(path)) from None
        raise
    os.set_blocking(fd, True)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)


def _write_export(path: Path, text: str) -> None:
    """``write_private_atomic`` under a name the cleaner knows, in ``writing_in``. Before,
    a stopped export left a private copy of the memories that no forget reached."""
    with writing_in(path.parent):
        write_private_atomic(path, text, tag=EXPORT_TMP)


# -- temporary files a killed writer left ------------------------------------------------------


@contextlib.contextmanager
def writing_in(folder: Path, *temporaries: Path) -> Iterator[None]:
    """Where every copy of the user's memories is written under a temporary name (marked
    as above) in ``folder``, with the writer's cleanup of it inside:

    - first, what a killed writer left there goes (``remove_matching``'s rules: never a
      live writer's, never a link nor another user's file);
    - the folder's lock is held, shared, meanwhile (``_sharing``), so that no cleaner
      removes the file being written;
    - SIGINT, SIGTERM and SIGHUP stop the process only once the writer's cleanup has
      removed its half-written file (``stopped_by_signals``); off the main thread, SIGTERM
      and SIGHUP remove ``temporaries`` first (``removed_on_stop``). SIGKILL leaves them,
      for the next writer there to remove.

    Before, a backup stopped so (``navi memory backup --to FILE``) left a full copy of the
    profile beside FILE for good: no cleaner knew its name or went to that folder."""
    remove_matching(folder, _LEFT, _LEFT_BY)
    with _sharing(folder), removed_on_stop(*temporaries), stopped_by_signals():
        yield


@contextlib.contextmanager
def _sharing(folder: Path) -> Iterator[None]:
    """Held, shared, while a file is written under a temporary name in ``folder``; a cleaner
    removes temporary files only while it holds the lock alone, so never one still being
    written by a backup, restore or export in this or another process. Where a file system
    has no such locks, nothing is held (the cleaner then goes by age).

    A cleaner holds the lock alone only for a moment, so it is waited for up to
    ``FOLDER_LOCK_WAIT_S``; past that, someone else holds it (anyone who can open a shared
    folder such as /tmp can), and the file is written without it rather than waited for
    without end. That stays safe: no cleaner removes anything while another holds the lock,
    and a cleaner removes only this user's own files, never through a link. (Should that
    other let go mid-write just as a cleaner of this user's runs there, this write fails and
    says so; nothing half-written stays.)"""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:  # no folder there: the write says so in its own words
        yield
        return
    try:
        try:
            take_lock(fd, fcntl.LOCK_SH, wait_s=FOLDER_LOCK_WAIT_S)
        except BlockingIOError:
            log.warning("another process holds the lock of %s; writing without it", folder)
        yield
    finally:
        os.close(fd)


def remove_matching(
    folder: Path, pattern: re.Pattern[str], left_by: str | Mapping[str, str]
) -> list[Path]:
    """Remove the user's own regular files in ``folder`` named as ``pattern``'s temporary
    files, when no writer holds ``writing_in`` there; ``left_by``: what left them, for the log
    (or that of each mark ``pattern``'s first group matches).
    Never waits: while any process holds the folder's lock (a writer, or another user in a
    shared folder), nothing is removed, and a later cleaner does it. Looked up and removed
    through the folder's descriptor, by name: a link is seen as a link and never followed."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return []  # no folder: nothing to remove
    removed: list[Path] = []
    try:
        try:
            locks = take_lock(fd, fcntl.LOCK_EX, wait_s=0)
        except BlockingIOError:
            return []  # a writer is at work right now: a later cleaner removes them
        oldest = math.inf if locks else time.time() - STALE_TMP_S  # no locks: go by age
        with os.scandir(fd) as entries:
            for entry in entries:
                match = pattern.match(entry.name)
                st = entry.stat(follow_symlinks=False) if match else None
                if not match or st is None or not stat.S_ISREG(st.st_mode):
                    continue
                if st.st_uid != os.geteuid() or st.st_mtime > oldest:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=fd)
                    removed.append(folder / entry.name)
                    by = left_by if isinstance(left_by, str) else left_by[match[1]]
                    log.warning("removed %s, left by %s", folder / entry.name, by)
    except OSError as exc:
        log.warning("leftover copies in %s not removed: %s", folder, exc)
    finally:
        os.close(fd)
    return removed
