"""Exports the app writes (a session, the whole memory): the user says where (the downloads
folder is offered), an existing file is replaced only after a confirm, and the file is
private to the user (0600) and whole or not at all, like every file Navi writes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from navi_desktop.errors import InvalidInput
from navi_desktop.fileio import write_user_file
from navi_desktop.tui.dialogs import ConfirmScreen, ask_text, confirmed


def default_folder() -> Path:
    """Where exports are offered: the user's downloads folder (platformdirs)."""
    import platformdirs

    return Path(platformdirs.user_downloads_dir())


def problem_with(text: str) -> str | None:
    """Why ``text`` cannot be an export's path, or None."""
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # ~name of no user here
        return f"{text.split('/')[0]} names no user's home folder"
    try:
        if path.is_dir():
            return f"{path} is a folder: add a file name"
        folder = path.parent
        if folder != default_folder() and not folder.is_dir():
            return f"the folder {folder} does not exist"
    except OSError as exc:  # a name too long, a folder that cannot be entered
        return f"{path}: {exc.strerror or exc}"
    return None


async def export_to(
    app: Any, what: str, name: str, text: Callable[[], Awaitable[str]]
) -> Path | None:
    """Ask where to write ``what`` (offering ``name`` in the downloads folder), confirm before
    replacing a file, then write what ``text()`` returns. None: the user cancelled. A write
    that fails asks again, with the path as typed and the reason."""
    body: str | None = None

    async def save(answer: str) -> Path | None:
        nonlocal body
        path = Path(answer).expanduser()
        if path.exists():
            replace = await app.push_screen_wait(
                ConfirmScreen(
                    "Replace the file?", f"{path} exists. Replace it with this export?", "Replace"
                )
            )
            if not confirmed(replace):
                return None
        if body is None:
            body = await text()
        try:
            if path.parent == default_folder():  # a fresh account may not have it yet
                await asyncio.to_thread(os.makedirs, path.parent, exist_ok=True)
            await asyncio.to_thread(write_user_file, path, body)
        except OSError as exc:  # named by the path typed, never a temporary file beside it
            raise InvalidInput(f"cannot write {path}: {exc.strerror or exc}") from exc
        return path

    offered = str(default_folder() / name)
    return await ask_text(app, f"Export {what} to", offered, save, check=problem_with)
