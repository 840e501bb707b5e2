"""Writing a user's file so that a crash never leaves half of it."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


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
