"""Reads of a profile that has no file yet. Opening a profile creates its file, so a look at
a new profile (the app in incognito with `--profile new`, `navi memory list --profile typo`)
left an empty memory behind under that name: incognito must leave nothing, and a typo should
not make a profile. Such a read is answered by an empty store kept in the daemon's run
folder instead; the first write opens (and creates) the profile itself."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from typing import TYPE_CHECKING, Any

from navi_desktop.fileio import nothing_at
from navi_desktop.paths import ensure_own_dir

if TYPE_CHECKING:
    from navi_desktop.daemon.service import Service
    from navi_desktop.memory.store import MemoryStore

FOLDER = "empty-profile"  # in the run folder; holds no one's memory


class EmptyProfile:
    """One empty store, opened on first need, for every profile that has no file yet."""

    def __init__(self) -> None:
        self._opening: asyncio.Future[MemoryStore] | None = None

    async def read_store(self, service: Service, profile: str) -> MemoryStore:
        """The store a call that only reads should use: the profile's own when it is open,
        on a server, in an error state or has a file; else the empty one."""
        from navi_desktop.memory.backends import on_server

        if (
            on_server(service.settings.memory)
            or profile in service._stores
            or profile in service._opening
            or service.profile_errors.has(profile)
            or not nothing_at(service.paths.profile_db(profile))
        ):
            return await service.store(profile)
        return await self._store(service)

    def serves(self, store: Any) -> bool:
        return store is self._opened()

    def _opened(self) -> MemoryStore | None:
        opening = self._opening
        if opening is None or not opening.done() or opening.cancelled() or opening.exception():
            return None
        return opening.result()

    async def _store(self, service: Service) -> MemoryStore:
        from navi_desktop.memory.store import MemoryStore

        opened = self._opened()
        if opened is not None and opened.db.moved_away():  # a cleaner of the run folder
            await self.close(service)
        if self._opening is None or (self._opening.done() and self._opened() is None):
            # Made afresh: it holds nothing, and one a killed daemon or another version left
            # (damaged, too new) would fail every such read with a profile's error.
            shutil.rmtree(service.paths.runtime / FOLDER, ignore_errors=True)  # not via a link
            folder = ensure_own_dir(service.paths.runtime / FOLDER, "run folder")
            self._opening = asyncio.ensure_future(MemoryStore.open(folder / "memory.db"))
        return await asyncio.shield(self._opening)

    async def close(self, service: Service) -> None:
        """Close the empty store and remove its folder (at the daemon's stop, or when a
        cleaner of the run folder took its file)."""
        if self._opening is None:
            return
        opening, self._opening = self._opening, None
        with contextlib.suppress(Exception):
            await (await opening).close()
        shutil.rmtree(service.paths.runtime / FOLDER, ignore_errors=True)
