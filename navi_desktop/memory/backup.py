"""Backups of a profile: SQLite's online backup API into a new private file.

A backup is a whole SQLite file, consistent as of one moment (the copy runs in one read
transaction, so writes go on meanwhile), readable by any SQLite tool and restorable with
``navi memory restore``. Backups live beside the profile, in ``backups/``:
``manual-<UTC time>.db`` from ``navi memory backup``, and ``daily-<UTC time>.db``, the rolling
ones the daemon makes after the first write of a day (``[memory] backups``, default 3 kept; a
profile only read, as in incognito use, gets none).

Every file is created with O_EXCL and O_NOFOLLOW, mode 0600, written under a temporary name
and linked into place only when whole: a failed or interrupted backup leaves nothing.
"""

from __future__ import annotations

import calendar
import contextlib
import errno
import os
import re
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import sqlean

from navi_desktop.errors import DiskFull, InvalidInput, NaviError
from navi_desktop.memory.failures import (
    free_bytes,
    megabytes,
    on_read_only_fs,
    read_only_fs,
    translate,
    unreachable,
)
from navi_desktop.memory.filecheck import Identity, read_only, wal_path
from navi_desktop.paths import ensure_private_dir

DAILY, MANUAL = "daily", "manual"
# A day, less an hour: a backup made a little earlier each day does not drift later.
DAILY_EVERY_S = 23 * 3600
# A backup stamped later than now by more than this was made under a clock set ahead. Before,
# one such (stamped a year ahead) stopped the daily backups for that year.
CLOCK_SLACK_S = 3600
# Free space a backup must leave, so that it never fills the disk the profile writes to.
RESERVE_BYTES = 64 << 20
_NAME = re.compile(r"^(daily|manual)-(\d{8}T\d{6}Z)(?:-\d+)?\.db$")
_STAMP = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True)
class BackupResult:
    path: Path
    bytes: int
    seconds: float

    def to_dict(self) -> dict[str, object]:
        return {"path": str(self.path), "bytes": self.bytes, "seconds": round(self.seconds, 3)}


def backups_dir(db_path: Path) -> Path:
    return Path(db_path).parent / "backups"


def _stamp(now: float | None = None) -> str:
    return time.strftime(_STAMP, time.gmtime(time.time() if now is None else now))


def _made_at(path: Path) -> float:
    match = _NAME.match(path.name)
    if not match:
        return 0.0
    return float(calendar.timegm(time.strptime(match[2], _STAMP)))


def _in_the_future(path: Path, now: float | None = None) -> bool:
    """Stamped later than now: made while the clock was set ahead, and since put right."""
    return _made_at(path) > (time.time() if now is None else now) + CLOCK_SLACK_S


def list_backups(db_path: Path, kind: str | None = None, *, now: float | None = None) -> list[Path]:
    """The profile's backups, newest first (``kind``: only "daily" or "manual" ones); one
    stamped in the future counts as the oldest."""
    try:
        entries = list(backups_dir(db_path).iterdir())
    except OSError:
        return []
    found = [
        p
        for p in entries
        if (m := _NAME.match(p.name)) and (kind is None or m[1] == kind) and p.is_file()
    ]
    # One stamped in the future sorts as the oldest: it would otherwise pass for the latest
    # (in a damaged file's advice) and outlive every backup made after the clock was fixed.
    return sorted(
        found,
        key=lambda p: (0.0 if _in_the_future(p, now) else _made_at(p), p.name),
        reverse=True,
    )


def latest_backup(db_path: Path) -> Path | None:
    found = list_backups(db_path)
    return found[0] if found else None


def is_file(path: Path) -> bool:
    """``path.is_file()``, but a folder above it that the user cannot search is said (pathlib
    raises a bare PermissionError for it: a traceback in `navi memory doctor` and `backup`)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except PermissionError:
        raise unreachable(path) from None
    except (FileNotFoundError, NotADirectoryError):
        return False


def make_backup(
    db_path: Path,
    target: Path | None = None,
    *,
    kind: str = MANUAL,
    now: float | None = None,
    expect: Identity | None = None,
) -> BackupResult:
    """Copy the profile's file into ``target`` (a new file; a folder gets a named file in
    it), by default a new file in its backups folder. A thread's work (blocking). ``expect``:
    the file the daemon has open, which must be the one copied (filecheck.check_opened)."""
    db_path = Path(db_path)
    if not is_file(db_path):
        raise InvalidInput(f"no memory file at {db_path}: nothing to back up")
    target = Path(target) if target is not None else None
    folder = backups_dir(db_path) if target is None else target.parent
    if target is not None and target.is_dir():
        folder = target
    size = sum(p.stat().st_size for p in (db_path, wal_path(db_path)) if p.exists())
    if on_read_only_fs(folder if folder.exists() else db_path.parent):
        raise read_only_fs(folder)
    free = free_bytes(folder if folder.exists() else db_path.parent)
    if free is not None and free < size + RESERVE_BYTES:
        raise DiskFull(
            f"not enough space for a backup: {megabytes(free)} MB free in {folder},"
            f" about {megabytes(size + RESERVE_BYTES)} MB needed; nothing was written"
        )
    if target is None:
        ensure_private_dir(folder)
        target = _free_name(folder, f"{kind}-{_stamp(now)}")
    elif target.is_dir():
        target = _free_name(target, f"navi-{db_path.parent.name}-{_stamp(now)}")
    started = time.perf_counter()
    written = copy_database(db_path, target, expect)
    return BackupResult(target, written, time.perf_counter() - started)


def copy_database(source: Path, target: Path, expect: Identity | None = None) -> int:
    """Copy a SQLite file (through its WAL, if any) into the new file ``target``, whole or
    not at all; returns its size. ``source`` is only read."""
    target = Path(target)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        src = read_only(source, expect=expect)
        try:
            dst = sqlean.connect(str(tmp), isolation_level=None)
            try:
                dst.execute("PRAGMA journal_mode = OFF")  # whole or nothing comes from the rename
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
        fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            _link_new(tmp, target)
        except FileExistsError:
            raise InvalidInput(f"{target} already exists; choose another name") from None
    except (OSError, sqlean.Error) as exc:
        # A write error is about the target's disk; a read error about the source.
        where = target if isinstance(exc, OSError) else source
        problem = translate(exc, where)
        raise (problem or NaviError(f"cannot copy {source} to {target}: {exc}")) from exc
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-journal")):
            with contextlib.suppress(OSError):
                leftover.unlink()
    _sync_folder(target.parent)
    return target.stat().st_size


def take_daily(
    db_path: Path, keep: int, *, now: float | None = None, expect: Identity | None = None
) -> BackupResult | None:
    """Make today's backup when none was made in the last day, then keep the newest ``keep``
    daily ones. None when not due (or ``keep`` is 0: turned off)."""
    if keep <= 0:
        return None
    now = time.time() if now is None else now
    daily = [p for p in list_backups(db_path, DAILY, now=now) if not _in_the_future(p, now)]
    if daily and now - _made_at(daily[0]) < DAILY_EVERY_S:
        return None
    result = make_backup(db_path, kind=DAILY, now=now, expect=expect)
    for old in list_backups(db_path, DAILY, now=now)[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()
    return result


def _free_name(folder: Path, base: str) -> Path:
    target, n = folder / f"{base}.db", 1
    while target.exists():
        n += 1
        target = folder / f"{base}-{n}.db"
    return target


def _link_new(tmp: Path, target: Path) -> None:
    """Give the finished file its name, never replacing a file already there."""
    try:
        os.link(tmp, target, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        # A file system without hard links: claim the name first, then rename over the claim.
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        os.replace(tmp, target)


def _sync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
