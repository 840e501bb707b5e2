"""Every memory file open in this process, so that a stop can close what nothing else did."""

from __future__ import annotations

import contextlib
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from navi_desktop.memory.db import Database

# Each connection has a thread of its own that keeps the process from exiting until it is
# closed: a stop closes what nothing else did (close_left). Weak: one nothing refers to any
# more is collected, and its thread stops with it.
OPEN: weakref.WeakSet[Database] = weakref.WeakSet()


async def close_left(*folders: Path) -> list[Path]:
    """Close the files still open under ``folders``, and return their paths: ones a call had
    opened when it went away, which left a stopped daemon running, holding the file, for
    good. (Under its folders only: a test may run a daemon beside files of its own.)"""
    left = [db for db in OPEN if any(db.path.is_relative_to(f) for f in folders)]
    for db in left:
        try:
            await db.close()
        except Exception:  # closing what is left must not stop the rest closing
            OPEN.discard(db)
            with contextlib.suppress(Exception):
                await db.conn.close()
    return [db.path for db in left]
