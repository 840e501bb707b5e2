"""``navi memory restore FILE``: a profile's file replaced by a backup, or by what the doctor
recovered, never half.

The backup is checked first (a whole Navi file, of a schema this version knows, that passes
SQLite's integrity check); a bad one changes nothing. It is copied beside the profile's file
under a temporary name, the current file is kept as ``memory.before-restore-<UTC time>.db``
(with its WAL, if any), and one rename puts the copy in place: at every moment the profile's
path holds either the old file or the new one. The daemon closes the profile first.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlean

from navi_desktop.errors import DiskFull, InvalidInput, ProfileError
from navi_desktop.memory.backup import RESERVE_BYTES, _sync_folder, copy_database
from navi_desktop.memory.failures import free_bytes, megabytes
from navi_desktop.memory.filecheck import APPLICATION_ID, check_file, probe, read_only
from navi_desktop.memory.migrations import check_schema
from navi_desktop.paths import ensure_private_dir


@dataclass(frozen=True)
class Restored:
    path: Path
    source: Path
    side_copy: Path | None
    memories: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "restored_from": str(self.source),
            "side_copy": str(self.side_copy) if self.side_copy else None,
            "memories": self.memories,
        }


def check_backup(backup: Path) -> int:
    """Refuse a file that would not make a working profile; returns its memories' count."""
    backup = Path(backup)
    refuse = f"{backup} cannot be restored"
    if not backup.exists():  # a folder or a named pipe: check_file says which
        raise InvalidInput(f"{refuse}: no such file")
    try:
        if not check_file(backup, writing=False):
            raise InvalidInput(f"{refuse}: it is empty; nothing was changed")
        probe(backup, check_schema)
    except ProfileError as exc:
        raise InvalidInput(f"{refuse}: {getattr(exc, 'what', exc)}; nothing was changed") from None
    conn = read_only(backup)
    try:
        if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
            raise InvalidInput(f"{refuse}: it is not a Navi memory file; nothing was changed")
        result = conn.execute("PRAGMA integrity_check(5)").fetchone()[0]
        if result != "ok":
            raise InvalidInput(
                f"{refuse}: it fails SQLite's integrity check ({result}); nothing was changed"
            )
        return int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])
    except sqlean.Error as exc:
        raise InvalidInput(f"{refuse}: SQLite cannot read it ({exc}); nothing was changed") from exc
    finally:
        conn.close()


def restore_file(backup: Path, path: Path) -> Restored:
    """Put a copy of ``backup`` at ``path`` (nothing may have ``path`` open). Blocking."""
    backup, path = Path(backup).absolute(), Path(path)
    memories = check_backup(backup)
    ensure_private_dir(path.parent)
    need = backup.stat().st_size + RESERVE_BYTES
    free = free_bytes(path.parent)
    if free is not None and free < need:
        raise DiskFull(
            f"not enough space to restore: {megabytes(free)} MB free in {path.parent},"
            f" about {megabytes(need)} MB needed; nothing was changed"
        )
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    incoming = path.with_name(f".{path.name}.restore-{secrets.token_hex(4)}.tmp")
    copy_database(backup, incoming)
    wal, shm = (path.with_name(path.name + s) for s in ("-wal", "-shm"))
    side: Path | None = None
    side_wal: Path | None = None
    try:
        if path.exists():
            side = path.with_name(f"{path.stem}.before-restore-{stamp}.db")
            os.link(path, side)
            if wal.exists() and wal.stat().st_size > 0:
                side_wal = side.with_name(side.name + "-wal")
                os.link(wal, side_wal)  # the WAL belongs with its file: kept together
        # The old file's WAL and index must not be applied to the new one.
        for stale in (wal, shm):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        os.replace(incoming, path)
    except BaseException:
        with contextlib.suppress(OSError):
            incoming.unlink()
        if side_wal is not None and not wal.exists():
            with contextlib.suppress(OSError):
                os.link(side_wal, wal)
        raise
    _sync_folder(path.parent)
    return Restored(path, backup, side, memories)
