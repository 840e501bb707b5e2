"""What a disk or a folder is like, asked of the operating system: free space, a read-only
file system, a folder the user cannot search. Standard library only: the CLI, the daemon's
start and the app's link use these, and must not load the memory engine for them."""

from __future__ import annotations

import os
from pathlib import Path


def free_bytes(folder: Path) -> int | None:
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def megabytes(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e6:.1f}"


def on_read_only_fs(path: Path) -> bool:
    for folder in (path, path.parent):
        try:
            return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
        except OSError:
            continue
    return False


def refusing_folder(path: Path) -> Path | None:
    """The first folder on the way down to ``path`` that the user cannot search, or None."""
    folders = reversed(Path(path).absolute().parents)
    return next((f for f in folders if not os.access(f, os.X_OK)), None)
