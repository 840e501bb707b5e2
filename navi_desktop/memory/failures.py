"""Telling a full disk, an I/O error, a file the user cannot read and a damaged file apart.

SQLite reports a full disk as SQLITE_FULL, but an I/O error while growing a file (the WAL,
its index) on a full disk as SQLITE_IOERR: an I/O error with almost no free space left is
taken as a full disk. Neither is damage, so neither message ever advises moving the file
aside; a damaged file's message points to ``navi memory doctor``, which checks it first.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from navi_desktop import os_errors
from navi_desktop.disk import (
    free_bytes,
    megabytes,
    on_read_only_fs,
    refusing_folder,
)
from navi_desktop.errors import (
    DiskError,
    DiskFull,
    NaviError,
    ProfileDamaged,
    ProfileMoved,
    ProfileUnreadable,
)
from navi_desktop.os_errors import READ_ONLY_FIX
from navi_desktop.paths import profile_option

# SQLite's primary result codes (the low byte of an extended one).
SQLITE_PERM, SQLITE_READONLY, SQLITE_IOERR, SQLITE_CORRUPT = 3, 8, 10, 11
SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_NOTADB = 13, 14, 26
# An I/O error with less free space than this is a full disk (a WAL frame, a page, an index).
LOW_SPACE_BYTES = 4 << 20
UNTOUCHED = "it was left untouched"
NEXT_CALL = " and Navi writes again by itself"


def damage_fix(path: Path) -> str:
    """What to do about a file SQLite found damaged: check it (the doctor runs the integrity
    check before saying anything else), or go back to the latest backup."""
    from navi_desktop.memory.backup import latest_backup  # a leaf module; avoids a cycle

    option = profile_option(path)
    fix = f"run `navi memory doctor{option}` to check it and recover what can be read"
    latest = latest_backup(path)
    if latest is not None:
        fix += f", or go back to the latest backup: `navi memory restore {latest}{option}`"
    return fix


def damaged(path: Path, what: str) -> ProfileDamaged:
    error = ProfileDamaged(f"{path} is damaged ({what}); it was left untouched: {damage_fix(path)}")
    error.what = what  # type: ignore[attr-defined]  # for the doctor, which has its own fix
    return error


def emptied(path: Path, backup: Path) -> ProfileDamaged:
    """``path`` is empty (0 bytes) while ``backup``, its newest backup that holds memories,
    does: emptied by a crash or by hand, not a new profile."""
    what = "it is empty (0 bytes), and its backups hold memories"
    error = ProfileDamaged(
        f"{path} is empty (0 bytes), and its backups hold memories; it was left untouched:"
        f" restore the latest: `navi memory restore {backup}{profile_option(path)}`"
    )
    error.what = what  # type: ignore[attr-defined]  # the doctor adds its own fix
    return error


def foreign_log(path: Path, reason: str) -> ProfileUnreadable:
    """The log beside ``path`` is another database's (filecheck.check_log). The file itself
    is whole: like a pipe where its log goes (not_a_file), what lies beside it is what must
    go, which restoring a backup (a damaged file's fix) would only do at the cost of every
    save made since that backup."""
    path = Path(path)
    log = f"{path.name}-wal"
    what = f"the log {log} beside it belongs to another database ({reason})"
    error = ProfileUnreadable(
        f"cannot use {path}: {what}; both were left untouched: move {log} away to open the"
        " file as it was at its last checkpoint"
    )
    error.what = what  # type: ignore[attr-defined]
    return error


def disk_full(path: Path, *, opening: bool = False) -> DiskFull:
    if opening:
        folder = Path(path).parent
        free = f"disk full: {megabytes(free_bytes(folder))} MB free in {folder}"
        return DiskFull(
            f"{free}; {Path(path).name} cannot be opened (SQLite needs room for its log) and was"
            " not changed: free some space and it opens again"
        )
    return os_errors.disk_full(
        path, "this change was not saved and everything saved before is intact", NEXT_CALL
    )


def moved(path: Path, *, replaced: bool) -> ProfileMoved:
    """The file open at ``path`` is no longer the one there (see Database.verify)."""
    if replaced:
        return ProfileMoved(
            f"{path} was replaced by another file while Navi had it open; Navi stopped using"
            " the old one and wrote nothing of it into the new one: try again, and Navi opens"
            " the new file"
        )
    return ProfileMoved(
        f"{path} was moved or deleted by another program while Navi had it open; what Navi"
        f" saved went with it: put the file back at {path} and Navi opens it again, or stop"
        " the daemon (`navi daemon stop`) to start with an empty memory"
    )


def unreadable(path: Path, reason: str) -> NaviError:
    return os_errors.no_access(path, reason, UNTOUCHED, kind=ProfileUnreadable)


def not_yours(path: Path, item: Path, owner: int) -> ProfileUnreadable:
    """``item`` (the memory file ``path`` or its folder) belongs to uid ``owner``."""
    me = os.geteuid()
    what = "the file" if item == path else f"its folder {item}"
    error = ProfileUnreadable(
        f"cannot use {path}: {what} belongs to uid {owner}, not to you (uid {me}), and a"
        " profile's files must be yours alone; it was left untouched: give it back to your user"
        f" (as root: `chown -R {me} {item}`), or use another profile (--profile NAME)"
    )
    error.what = f"{what} belongs to uid {owner}"  # type: ignore[attr-defined]
    return error


def unreachable(path: Path) -> ProfileUnreadable:
    """The error for a file hidden by a folder above it that the user cannot search: the
    first such folder on the way down is named, with the chmod that opens it."""
    path = Path(path).absolute()
    folder = refusing_folder(path) or path.parent
    if folder == path.parent:
        return unreadable(path, f"permission denied on its folder {folder}")
    error = ProfileUnreadable(
        f"cannot use {path}: permission denied on the folder {folder}; it was left untouched:"
        f" give your user access to that folder (e.g. `chmod u+rwx {folder}`)"
    )
    error.what = f"permission denied on the folder {folder}"  # type: ignore[attr-defined]
    return error


def not_a_file(path: Path, reason: str) -> NaviError:
    """Something other than a file where the profile's files go: no permission would help."""
    return os_errors.not_a_file(path, reason, UNTOUCHED, kind=ProfileUnreadable)


def linked(path: Path, target: str) -> ProfileUnreadable:
    """A symbolic link at the profile's file: its target may sit in a folder others can read,
    out of reach of the profile folder's privacy (and a dangling one made a file there)."""
    fix = (
        f"move the file itself there (`mv {target} {path}`), or set NAVI_HOME to where your"
        " memory is"
        if os.path.exists(path)
        else f"it leads nowhere: remove it (`rm {path}`)"
    )
    error = ProfileUnreadable(
        f"cannot use {path}: it is a symbolic link (to {target}), and Navi opens a profile's"
        f" file only in the profile's own folder; it was left untouched: {fix}"
    )
    error.what = f"it is a symbolic link (to {target})"  # type: ignore[attr-defined]
    return error


def read_only_fs(path: Path) -> DiskError:
    """The file system holding ``path`` is mounted read-only: no permission would help. Like
    a full disk, not a state of the profile: the next call tries again."""
    return os_errors.read_only(path, "nothing was changed", "," + NEXT_CALL)


def not_set_up(path: Path) -> NaviError:
    """An empty memory file (a new profile) opened only to read: there is nothing in it to
    read, and Navi cannot set it up. It is there: before, this said "no memory file"."""
    what = "it is empty (0 bytes: a new profile Navi has not set up yet)"
    if not on_read_only_fs(path):  # the user may not write it
        return unreadable(path, f"{what}, and it cannot be written to set it up")
    return DiskError(
        f"cannot use {path}: {what}, and its file system is read-only, so it cannot be set"
        f" up; nothing was changed: {READ_ONLY_FIX}, and Navi sets it up by itself"
    )


def _code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF
    text = str(exc).lower()  # errors raised without a code (the module's own)
    for needle, primary in (
        ("disk is full", SQLITE_FULL),
        ("disk i/o error", SQLITE_IOERR),
        ("malformed", SQLITE_CORRUPT),
        ("not a database", SQLITE_NOTADB),
        ("readonly database", SQLITE_READONLY),
        ("unable to open", SQLITE_CANTOPEN),
    ):
        if needle in text:
            return primary
    return None


def translate(exc: BaseException, path: Path, *, opening: bool = False) -> NaviError | None:
    """The error to report for ``exc``, met while using (``opening``) the file at ``path``;
    None when it is not about the file or the disk (a constraint, a bug: the caller re-raises
    it as it is)."""
    path = Path(path)
    if isinstance(exc, NaviError):
        return exc
    if isinstance(exc, OSError) and not hasattr(exc, "sqlite_errorcode"):
        return _translate_os(exc, path, opening)
    code = _code(exc)
    writing = (SQLITE_READONLY, SQLITE_PERM, SQLITE_CANTOPEN, SQLITE_IOERR)
    if code in writing and on_read_only_fs(path):
        return read_only_fs(path)
    if code == SQLITE_FULL:
        return disk_full(path, opening=opening)
    if code == SQLITE_IOERR:
        free = free_bytes(path.parent)
        if free is not None and free < LOW_SPACE_BYTES:
            return disk_full(path, opening=opening)
        return DiskError(
            f"the disk reported an I/O error using {path} ({exc}); this change was not saved:"
            " check the disk (free space, `dmesg`), then try again"
        )
    if code in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return damaged(path, str(exc))
    if code in (SQLITE_READONLY, SQLITE_PERM, SQLITE_CANTOPEN):
        if not os.access(path.parent, os.W_OK | os.X_OK):
            return unreadable(path, f"its folder {path.parent} is not writable")
        return unreadable(path, str(exc))
    return None


def os_failure(exc: OSError, path: Path, *, opening: bool = False) -> NaviError:
    """The error to report for an OS error met using ``path`` (never None, unlike translate)."""
    return _translate_os(exc, Path(path), opening)


def _translate_os(exc: OSError, path: Path, opening: bool) -> NaviError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return disk_full(path, opening=opening)
    if exc.errno == errno.EROFS:  # like a full disk: the next call tries again
        return read_only_fs(path)
    return os_errors.os_refusal(exc, path, UNTOUCHED, kind=ProfileUnreadable)
