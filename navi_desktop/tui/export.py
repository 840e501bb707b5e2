"""Exports the app writes (a session, the whole memory): the user says where (the downloads
folder is offered), an existing file is replaced only after a confirm, and the file is
private to the user (0600) and whole or not at all, like every file Navi writes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from navi_desktop.fileio import write_user_file
from navi_desktop.tui.dialogs import ConfirmScreen, TextScreen, confirmed


def default_folder() -> Path:
    """Where exports are offered: the user's downloads folder (platformdirs)."""
    import platformdirs

    return Path(platformdirs.user_downloads_dir())


def problem_with(text: str) -> str | None:
    """Why ``text`` cannot be an export's path, or None."""
    path = Path(text).expanduser()
    if path.is_dir():
        return f"{path} is a folder: add a file name"
    folder = path.parent
    if folder != default_folder() and not folder.is_dir():
        return f"the folder {folder} does not exist"
    return None


async def export_to(
    app: Any, what: str, name: str, text: Callable[[], Awaitable[str]]
) -> Path | None:
    """Ask where to write ``what`` (offering ``name`` in the downloads folder), confirm before
    replacing a file, then write what ``text()`` returns. None: the user cancelled."""
    offered = str(default_folder() / name)
    answer = await app.push_screen_wait(
        TextScreen(f"Export {what} to", offered, check=problem_with)
    )
    if answer is None:
        return None
    path = Path(answer).expanduser()
    if path.exists():
        replace = await app.push_screen_wait(
            ConfirmScreen(
                "Replace the file?", f"{path} exists. Replace it with this export?", "Replace"
            )
        )
        if not confirmed(replace):
            return None
    body = await text()
    if path.parent == default_folder():
        await asyncio.to_thread(os.makedirs, path.parent, exist_ok=True)  # a fresh account
    await asyncio.to_thread(write_user_file, path, body)
    return path
