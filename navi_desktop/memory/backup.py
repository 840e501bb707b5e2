"""Backups of a profile: SQLite's online backup API into a new private file.

A backup is a whole SQLite file, consistent as of one moment (the copy runs in one read
transaction, so writes go on meanwhile), readable by any SQLite tool and restorable with
``navi memory restore``. Backups live beside the profile, in ``backups/``:
``manual-<UTC time>.db`` from ``navi memory backup``, and ``daily-<UTC time>.db``, the rolling
ones the daemon makes after the first write of a day (``[memory] backups``, default 3 kept; a
profile only read, as in incognito use, gets none).

Every file is created with O_EXCL and O_NOFOLLOW, mode 0600, written under a temporary name
and linked into place only when whole and when SQLite's quick check passes: a failed backup
leaves nothing, and a damaged profile is refused rather than copied (a copy of it would restore
nothing). One stopped by SIGINT, SIGTERM or SIGHUP removes its temporary file first; a killed
one leaves it, removed by the next backup, restore or forget (``remove_leftovers``), and
beside a file of the user's choosing (``--to``) by the next backup or export there
(``writing_in``). Only a regular file in ``backups/`` is a backup: a link there is never
followed, opened or counted.
"""

from __future__ import annotations

import calendar
import contextlib
import errno
import logging
import os
import re
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import sqlean

from navi_desktop.errors import DiskFull, InvalidInput, NaviError, ProfileDamaged
from navi_desktop.fileio import COPY_TMP, remove_matching, temp_name_base, writing_in
from navi_desktop.memory.failures import (
    free_bytes,
    megabytes,
    on_read_only_fs,
    read_only_fs,
    translate,
    unreachable,
)
from navi_desktop.memory.filecheck import (
    Identity,
    check_file,
    identity,
    new_file_id,
    read_only,
    wal_path,
)
from navi_desktop.paths import ensure_private_dir

log = logging.getLogger(__name__)
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
# The temporary names copy_database and a restore write under (and SQLite's files beside them);
# copy_database's without its mark too, as an older version named them.
_SIDE = r"(?:-journal|-wal|-shm)?"
_COPY = rf"(?:{COPY_TMP})?[0-9a-f]{{8}}\.tmp"
_BACKUP_TMP = re.compile(rf"^\.(?:daily|manual)-\d{{8}}T\d{{6}}Z(?:-\d+)?\.db\.{_COPY}{_SIDE}$")
_LEFT_BY = "a stopped backup or restore"
_named: set[str] = set()  # the odd entries of backups/ already logged


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


def backup_files(db_path: Path, kind: str | None = None, *, now: float | None = None) -> list[Path]:
    """Every regular file in backups/ named as a backup, whole or damaged, newest first
    (``kind``: only "daily" or "manual" ones); one stamped in the future counts as the oldest.
    A link or anything else there is never followed nor counted: it is logged once (the
    doctor names it, ``unusable``). Before, a forget rewrote the file such a link named."""
    found, odd = _scan(db_path, kind)
    for path, why in odd:
        if str(path) not in _named:
            _named.add(str(path))
            log.warning("%s is %s: skipped", path, why)
    # One stamped in the future sorts as the oldest: it would otherwise pass for the latest
    # (in a damaged file's advice) and outlive every backup made after the clock was fixed.
    return sorted(
        found,
        key=lambda p: (0.0 if _in_the_future(p, now) else _made_at(p), p.name),
        reverse=True,
    )


def list_backups(db_path: Path, kind: str | None = None, *, now: float | None = None) -> list[Path]:
    """The backups that can be restored (whole SQLite files), newest first: the first is the
    one advice names as "the latest backup". A damaged one is left out (``unusable``)."""
    return [p for p in backup_files(db_path, kind, now=now) if backup_problem(p) is None]


def survey(db_path: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """``list_backups`` and ``unusable`` at once, each file looked at once (the doctor)."""
    whole: list[Path] = []
    damaged: list[tuple[Path, str]] = []
    for path in backup_files(db_path):
        if (why := backup_problem(path)) is None:
            whole.append(path)
        else:
            damaged.append((path, f"damaged ({why})"))
    return whole, damaged + _scan(db_path, None)[1]


def latest_backup(db_path: Path) -> Path | None:
    found = list_backups(db_path)
    return found[0] if found else None


def backup_problem(path: Path) -> str | None:
    """Why a backup file cannot be restored (check_file: its header, and its size against the
    one its header announces), or None when it looks whole."""
    try:
        return None if check_file(path, writing=False) else "it is empty"
    except NaviError as exc:
        return str(getattr(exc, "what", None) or exc)


def unusable(db_path: Path) -> list[tuple[Path, str]]:
    """For the doctor: each entry of backups/ named as a backup that cannot be restored
    (damaged, empty, a link, not a file), with why."""
    return survey(db_path)[1]


def _scan(db_path: Path, kind: str | None) -> tuple[list[Path], list[tuple[Path, str]]]:
    """backups/'s regular files named as backups, and its other entries so named, with why."""
    folder = backups_dir(db_path)
    found: list[Path] = []
    odd: list[tuple[Path, str]] = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            match = _NAME.match(entry.name)
            if not match or (kind is not None and match[1] != kind):
                continue
            if entry.is_file(follow_symlinks=False):
                found.append(folder / entry.name)
            else:
                what = "a link" if entry.is_symlink() else "not a regular file"
                odd.append((folder / entry.name, f"{what}, not a backup Navi made"))
    return found, odd


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
    try:  # the cheap check first (its header and size): the copy's own check reads it all
        # A file open here is not read (filecheck._open_here); a file that replaced the one
        # the daemon has open is left to the copy, which says it moved.
        if expect is None or identity(db_path) == expect:
            check_file(db_path, writing=False)
    except ProfileDamaged as exc:
        raise not_copied(db_path, getattr(exc, "what", str(exc))) from None
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
        remove_leftovers(db_path)
        target = _free_name(folder, f"{kind}-{_stamp(now)}")
    elif target.is_dir():
        target = _free_name(target, f"navi-{db_path.parent.name}-{_stamp(now)}")
    started = time.perf_counter()
    written = copy_database(db_path, target, expect)
    return BackupResult(target, written, time.perf_counter() - started)


def copy_database(
    source: Path, target: Path, expect: Identity | None = None, *, checked: bool = False
) -> int:
    """Copy a SQLite file (through its WAL, if any) into the new file ``target``, whole or
    not at all, and only when SQLite's quick check of the copy passes (``checked``: the
    source passed a full check just now, which a second read of it all would repeat);
    returns its size. ``source`` is only read. Written in ``writing_in``, under a name its
    cleaner knows, and removed there (a stopping signal waits for that)."""
    target = Path(target)
    base = temp_name_base(target, len(f"..{COPY_TMP}01234567.tmp-journal"))  # journal fits
    tmp = target.with_name(f".{base}.{COPY_TMP}{secrets.token_hex(4)}.tmp")
    journal = tmp.with_name(tmp.name + "-journal")
    with writing_in(target.parent, tmp, journal):
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
            _copy_into(source, tmp, expect, checked=checked)
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
            for leftover in (tmp, journal):
                with contextlib.suppress(OSError):
                    leftover.unlink()
    _sync_folder(target.parent)
    return target.stat().st_size


def _copy_into(source: Path, tmp: Path, expect: Identity | None, *, checked: bool) -> None:
    """SQLite's copy of ``source`` into the empty file ``tmp``, checked and on the disk."""
    src = read_only(source, expect=expect)
    try:
        dst = sqlean.connect(str(tmp), isolation_level=None)
        try:
            dst.execute("PRAGMA journal_mode = OFF")  # whole or nothing: the rename
            src.backup(dst)
            if dst.execute("PRAGMA user_version").fetchone()[0]:
                # A file of its own: the profile's log, left by a crash beside a backup put
                # back by hand, is then refused as another file's, not replayed into it.
                dst.execute(f"PRAGMA user_version = {new_file_id()}")
            if not checked:
                _check_copy(dst, source)
        finally:
            dst.close()
    finally:
        src.close()
    fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_copy(dst: sqlean.Connection, source: Path) -> None:
    """SQLite's quick check of the copy before it gets its name: the header check misses
    damage inside the pages (a disk's flipped bytes), and a backup of a damaged file then
    passed for the latest one, which its restore refused. 0.7-0.8 s for a 1.1 GB profile, in
    a backup of 2.3-2.8 s (integrity_check, which also checks indexes: about the same)."""
    result = dst.execute("PRAGMA quick_check(1)").fetchone()[0]
    if result != "ok":
        raise not_copied(source, f"SQLite's check of its copy: {' '.join(result.split())}")


def not_copied(source: Path, what: str) -> ProfileDamaged:
    from navi_desktop.memory.failures import damage_fix

    error = ProfileDamaged(
        f"{source} is damaged ({what}): no backup was made (a copy of it would restore"
        f" nothing); {damage_fix(source)}"
    )
    error.what = what  # type: ignore[attr-defined]
    return error


def take_daily(
    db_path: Path, keep: int, *, now: float | None = None, expect: Identity | None = None
) -> BackupResult | None:
    """Make today's backup when no whole one was made in the last day, then keep the newest
    ``keep`` whole daily ones (a damaged one among them stays, for the doctor to name). None
    when not due (or ``keep`` is 0: turned off)."""
    if keep <= 0:
        return None
    now = time.time() if now is None else now
    daily = [p for p in list_backups(db_path, DAILY, now=now) if not _in_the_future(p, now)]
    if daily and now - _made_at(daily[0]) < DAILY_EVERY_S:
        return None
    result = make_backup(db_path, kind=DAILY, now=now, expect=expect)
    whole = 0
    for old in backup_files(db_path, DAILY, now=now):
        if whole < keep:
            whole += backup_problem(old) is None
            continue
        with contextlib.suppress(OSError):
            old.unlink()
    return result


# -- what a killed backup or restore left --------------------------------------------------------


def incoming_name(path: Path) -> Path:
    """The temporary name a restore copies its backup to, beside the profile's file."""
    return path.with_name(f".{path.name}.restore-{secrets.token_hex(4)}.tmp")


def _restore_tmp(path: Path) -> re.Pattern[str]:
    # incoming_name, and copy_database's own temporary name for it
    name = re.escape(path.name)
    return re.compile(rf"^\.\.?{name}\.restore-[0-9a-f]{{8}}\.tmp(?:\.{_COPY})?{_SIDE}$")


def remove_leftovers(db_path: Path) -> list[Path]:
    """Remove the temporary copies a killed backup (in backups/) or restore (beside the file)
    left: full copies of the profile that no forget would reach and nothing would report."""
    db_path = Path(db_path)
    removed = remove_matching(backups_dir(db_path), _BACKUP_TMP, _LEFT_BY)
    return removed + remove_matching(db_path.parent, _restore_tmp(db_path), _LEFT_BY)


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
