"""Writing a user's file so that a crash never leaves half of it, and reading one that may
not be what its name says."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path


class NotRegularFile(OSError):
    """A path that holds a folder, a named pipe or a device where a file was expected."""


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
