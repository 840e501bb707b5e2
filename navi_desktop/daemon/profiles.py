"""Profiles that cannot be opened, and giving a profile's file back (restore).

One profile's trouble is that profile's error: its calls get the error, the daemon and the
other profiles go on. A profile whose file is damaged, foreign, unreadable or too new stays
in that error state, without its file being opened again, until the file changes (a
restore, a chmod, a newer Navi): then the next call tries again. A full disk or an I/O
error at open is not a state: the next call simply tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from navi_desktop.daemon.method_params import ProfileParams
from navi_desktop.daemon.params import file_path, takes
from navi_desktop.errors import InvalidInput, NaviError, ProfileError
from navi_desktop.memory.failures import moved, on_read_only_fs
from navi_desktop.memory.filecheck import identity

if TYPE_CHECKING:
    from navi_desktop.daemon.service import Service
    from navi_desktop.memory.store import MemoryStore

log = logging.getLogger(__name__)
Signature = tuple[Any, ...]


def _signature(path: Path) -> Signature:
    """What changes when the file, its WAL or its folder's permissions change."""
    parts: list[Any] = []
    for p in (path, path.with_name(path.name + "-wal"), path.parent):
        try:
            st = os.stat(p)
        except OSError as exc:
            parts.append(("missing", exc.errno))
            continue
        parts.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode))
    return tuple(parts)


class ProfileErrors:
    """The last failed open of each profile, with the state of its file then."""

    def __init__(self) -> None:
        self._errors: dict[str, tuple[NaviError, Signature]] = {}

    def check(self, profile: str, path: Path) -> None:
        """Raise the profile's error again while its file is as it was when it failed."""
        entry = self._errors.get(profile)
        if entry is None:
            return
        error, signature = entry
        if isinstance(error, ProfileError) and signature == _signature(path):
            raise type(error)(str(error))  # a new instance: tracebacks do not pile up on one
        self._errors.pop(profile, None)

    def record(self, profile: str, path: Path, error: NaviError) -> None:
        if profile not in self._errors:
            log.warning("profile %s cannot be opened: %s", profile, error)
        self._errors[profile] = (error, _signature(path))

    def clear(self, profile: str) -> None:
        self._errors.pop(profile, None)

    def has(self, profile: str) -> bool:
        return profile in self._errors

    def to_dict(self) -> dict[str, dict[str, str]]:
        """For ``daemon.status``: each profile in an error state, its kind and message."""
        return {
            profile: {"kind": type(error).__name__, "message": str(error)}
            for profile, (error, _) in sorted(self._errors.items())
        }


async def restore(service: Service, profile: str, backup: Path) -> dict[str, Any]:
    """Replace the profile's file with a checked copy of ``backup`` (restore.py), its store
    closed meanwhile and opened again after; the current file is kept beside it. Calls on the
    profile made meanwhile wait for the new store (they never see the file half-swapped).
    Refused while a reply or a session end is running."""
    from navi_desktop.memory.restore import restore_file
    from navi_desktop.memory.store import MemoryStore

    path = service.paths.profile_db(profile)
    if any(key[0] == profile for key in service._ending) or service._turns:
        raise InvalidInput(
            "a reply or a session end is running; restore when it is done (or cancel it)"
        )
    if profile in service._opening:  # an open under way finishes first
        with contextlib.suppress(NaviError):
            await asyncio.shield(service._opening[profile])
    outcome: dict[str, Any] = {}
    old = service._stores.pop(profile, None)
    _cancel_timers(service, profile)

    async def swap() -> MemoryStore:
        if old is not None:
            await old.close()
        try:
            outcome["done"] = await asyncio.to_thread(restore_file, backup, path)
        except Exception as exc:  # the old file stays; it is opened again
            outcome["error"] = exc
        return await MemoryStore.open(path, embedder=service._embedder())

    service._opening[profile] = asyncio.ensure_future(swap())  # what store() waits for
    service.profile_errors.clear(profile)
    with contextlib.suppress(NaviError):  # a file that does not open is its error state
        await service.store(profile)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["done"].to_dict()


async def open_store(service: Service, path: Path) -> MemoryStore:
    """The profile's file opened to read and write; on a read-only file system (Linux makes
    one so after a disk error), opened only to read: its memories can still be browsed,
    searched and exported, and each save says why it cannot be made."""
    from navi_desktop.memory.backup import remove_leftovers
    from navi_desktop.memory.store import MemoryStore

    read_only = on_read_only_fs(path) and identity(path) is not None
    if not read_only:  # full copies a killed backup or restore left (backup.py)
        await asyncio.to_thread(remove_leftovers, path)
    return await MemoryStore.open(path, embedder=service._embedder(), read_only=read_only)


def writable_again(store: MemoryStore) -> bool:
    """Whether a profile opened only to read is on a file system that can be written again
    (a statvfs call: cheap enough for every use)."""
    return store.db.read_only and not on_read_only_fs(store.path)


def reopen(service: Service, profile: str, why: str) -> None:
    """Close the open profile and open its file again (``store()`` waits for it)."""
    old = service._stores.pop(profile)

    async def again() -> MemoryStore:
        try:
            await old.close()
        except Exception as exc:
            log.warning("closing %s to open it again: %s", old.path, exc)
        log.info("opening profile %s again: %s", profile, why)
        return await open_store(service, old.path)

    service._opening[profile] = asyncio.ensure_future(again())


def replace_moved(service: Service, profile: str) -> None:
    """Another program moved, deleted or replaced an open profile's file. The old one is
    closed first: until then its log and index files lie beside the path, and a file opened
    there would read them as its own. Then the file now at the path is opened (``store()``
    waits for it); with none there, the profile's error says where its file went, until a
    file is put back (or the daemon restarts, and starts an empty one)."""
    from navi_desktop.memory.store import MemoryStore

    old = service._stores.pop(profile)
    _cancel_timers(service, profile)
    path = service.paths.profile_db(profile)

    async def reopen() -> MemoryStore:
        try:
            await old.close()  # waits for a write under way; later ones are refused
        except Exception as exc:
            log.warning("closing %s after it was moved: %s", path, exc)
        _drop_stale_log(old)
        if identity(path) is None:
            raise moved(path, replaced=False)
        return await MemoryStore.open(path, embedder=service._embedder())

    service._opening[profile] = asyncio.ensure_future(reopen())
    service._spawn(
        service.broadcast("memory", "memory.changed", {"profile": profile, "method": "moved"})
    )


def _cancel_timers(service: Service, profile: str) -> None:
    """The profile's inactivity timers: their sessions belong to the file being let go."""
    for key in [k for k in service._timers if k[0] == profile]:
        service._timers.pop(key).cancel()


def _drop_stale_log(old: MemoryStore) -> None:
    """The closed file's log and its index, when still at the path (its close failed, or
    another program still reads it): the file now at the path would read them as its own,
    and a copy kept aside would hold text that no forget reaches. Only the very files the
    old one had open go: a log that came with the new file stays."""
    for log_file, opened in old.db.log_files.items():
        with contextlib.suppress(OSError):
            if opened is not None and identity(log_file) == opened:
                size = os.stat(log_file).st_size
                log_file.unlink()
                log.warning("removed %s (%d bytes) of the file that was moved", log_file, size)


# -- RPC ---------------------------------------------------------------------------------------


class ProfileRestore(ProfileParams):
    file: file_path()  # type: ignore[valid-type]


def handlers(service: Service) -> dict[str, Any]:
    return {"profile.restore": partial(_restore_method, service)}


@takes(ProfileRestore)
async def _restore_method(service: Service, params: ProfileRestore, peer: Any) -> dict[str, Any]:
    """``profile.restore {file, profile?}``: the profile's file replaced by a backup."""
    profile = service.profile(params.profile)
    result = await restore(service, profile, Path(params.file).expanduser())
    await service.broadcast(
        "memory", "memory.changed", {"profile": profile, "method": "profile.restore"}
    )
    return result
