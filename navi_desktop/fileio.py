"""Writing a user's file so that a crash never leaves half of it, and reading one that may
not be what its name says."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

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


@contextlib.contextmanager
def locked(fd: int) -> Iterator[None]:
    """Hold the advisory lock (``flock``) of the file open at ``fd``. The daemon writes each
    log line under it and a scrub or a trim holds it from reading a log to truncating it, so
    no line lands in between (it was lost). Per open file: a thread of the daemon that
    opened the log itself waits as another process does."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:  # a file system without locks: the work is done anyway, as before
        yield
        return
    try:
        yield
    finally:
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


def write_private_atomic(path: Path, text: str) -> None:
    """Write ``text`` through a temp file in the same folder, fsync, rename it over ``path``
    and fsync the folder: readers see the old file or the new one, never half. Mode 0600."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
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
    if stat.S_ISREG(mode):
        write_private_atomic(path.resolve() if path.is_symlink() else path, text)
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
