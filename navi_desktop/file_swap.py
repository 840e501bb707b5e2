"""Putting a new file in place of one only if that one is still what was read: a program
that saves the file meanwhile (an editor) keeps its save. Linux swaps the two names in one
step (``renameat2`` with ``RENAME_EXCHANGE``), so the file taken out is the one compared and
nothing saved before the swap is lost; where it cannot, the file is compared, then replaced,
and a save in the moment between is lost."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
from collections.abc import Callable
from pathlib import Path

AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
# What a system or file system without the swap answers (an old kernel, NFS, FUSE, macOS).
_NO_SWAP = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM}


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)


def _rename(src: Path | str, dst: Path | str, flags: int) -> None:
    call = _renameat2()
    if call is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available", str(dst))
    if call(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(dst))


def put_if_unchanged(new: Path | str, path: Path, check: Callable[[Path], None]) -> None:
    """Rename ``new`` over ``path`` if ``check`` passes on the file it replaces. ``check``
    raises when the file at the path it is given is not the one the caller read; then
    ``path`` holds that file still (``new`` is left where it was)."""
    ours = os.stat(new).st_ino
    try:
        _rename(new, path, RENAME_EXCHANGE)
    except OSError as exc:
        if exc.errno == errno.ENOENT and not os.path.lexists(path):  # none was there to read
            _create(new, path, check)
            return
        if exc.errno not in _NO_SWAP:
            raise
        check(path)
        os.replace(new, path)
        return
    try:
        check(Path(new))  # what was at ``path`` until the swap
    except BaseException:
        _rename(new, path, RENAME_EXCHANGE)  # theirs back in place, this one out again
        if os.stat(new).st_ino != ours:  # saved over this one meanwhile: that save is newer
            _rename(new, path, RENAME_EXCHANGE)
        raise
    os.unlink(new)


def _create(new: Path | str, path: Path, check: Callable[[Path], None]) -> None:
    """``new`` renamed to ``path``, where no file was: one made meanwhile is not replaced."""
    try:
        _rename(new, path, RENAME_NOREPLACE)
        return
    except OSError as exc:
        if exc.errno != errno.EEXIST and exc.errno not in _NO_SWAP:
            raise
    check(path)  # one made meanwhile is not the none that was read: raises
    os.replace(new, path)
