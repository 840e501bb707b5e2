"""Exports the app writes (a session, the whole memory): into the current folder, private to
the user (0600) and whole or not at all, like every file Navi writes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from navi_desktop.fileio import write_private_atomic


async def export_here(name: str, text: str) -> Path:
    path = Path.cwd() / name
    await asyncio.to_thread(write_private_atomic, path, text)
    return path
