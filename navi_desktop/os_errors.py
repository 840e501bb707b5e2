"""One wording for what the OS refuses (a full disk, a read-only file system, a permission, a
folder where a file goes), shared by the memory engine and the settings writer. Each caller
says what stayed as it was (``kept``) and what follows the fix (``then``). Light: the
settings code uses it without loading the memory engine."""

from __future__ import annotations

import errno
from pathlib import Path

from navi_desktop.disk import free_bytes, megabytes
from navi_desktop.errors import DiskError, DiskFull, NaviError

READ_ONLY_FIX = "mount it read-write again (after a disk error, check the disk first: `dmesg`)"


def disk_full(path: Path, kept: str, then: str = "") -> DiskFull:
    free = f"disk full: {megabytes(free_bytes(Path(path).parent))} MB free in {Path(path).parent}"
    error = DiskFull(f"{free}; {kept}: free some space{then}")
    error.cause = free  # type: ignore[attr-defined]
    return error


def read_only(path: Path, kept: str, then: str = "") -> DiskError:
    error = DiskError(
        f"cannot write {path}: its file system is read-only (mounted so, or made so after a"
        f" disk error); {kept}: {READ_ONLY_FIX}{then}"
    )
    error.what = "its file system is read-only"  # type: ignore[attr-defined]
    return error


def no_access(
    path: Path, reason: str, kept: str, then: str = "", kind: type[NaviError] = NaviError
) -> NaviError:
    path = Path(path)
    error = kind(
        f"cannot use {path}: {reason}; {kept}: give your user read and write access to it and"
        f" its folder (e.g. `chmod u+rw {path}` and `chmod u+rwx {path.parent}`){then}"
    )
    error.what = reason  # type: ignore[attr-defined]
    return error


def not_a_file(
    path: Path, reason: str, kept: str, then: str = "", kind: type[NaviError] = NaviError
) -> NaviError:
    """Something other than a file where one goes: no permission would help."""
    error = kind(f"cannot use {path}: {reason}; {kept}: move that away{then or ', then try again'}")
    error.what = reason  # type: ignore[attr-defined]
    return error


def os_refusal(
    exc: OSError, path: Path, kept: str, then: str = "", kind: type[NaviError] = NaviError
) -> NaviError:
    """The one line for ``exc``, met using ``path``; ``kind``: the class of a refusal about
    the file itself (permission, not a file)."""
    path = Path(path)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return disk_full(path, kept, then)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return no_access(path, f"permission denied on {exc.filename or path}", kept, then, kind)
    if exc.errno == errno.EROFS:
        return read_only(path, kept, then)
    if exc.errno == errno.EISDIR:
        return not_a_file(path, "it is a folder, not a file", kept, then, kind)
    if exc.errno == errno.ENOTDIR and (above := not_a_folder(path)) is not None:
        return not_a_file(path, f"{above} is not a folder", kept, then, kind)
    reason = exc.strerror or str(exc)
    then = then or ", then try again"
    return DiskError(f"cannot use {path}: {reason}; {kept}: check the disk{then}")


def not_a_folder(path: Path) -> Path | None:
    """The nearest folder above ``path`` that something else stands in for (a file, a pipe)."""
    for folder in reversed(Path(path).parents):
        try:
            if not folder.is_dir():
                return folder if folder.exists() or folder.is_symlink() else None
        except OSError:
            return None
    return None
