"""How many profiles the daemon keeps open.

Each open profile holds a thread, its files and its caches (its search index, once
searched): a script that named a new profile in each call grew the daemon by 1,200 threads
and 1 GB in 13 s, on its way to running out of files for everyone. So at most MAX_OPEN
local profiles are open at once; at the cap the least recently used one that has been idle
a minute makes room, and with none such a new profile is refused in one line. A profile
idle for IDLE_CLOSE_S is closed by the daemon's minute tick. A closed profile opens again
on its next use. The configured profile, and a profile with an open session, a reply or a
session end under way, or work left to retry (a session end, a forget's scrub), are never
closed this way.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from navi_desktop.errors import InvalidInput, NaviError

if TYPE_CHECKING:
    from navi_desktop.daemon.service import Service

log = logging.getLogger(__name__)
MAX_OPEN = 32
IDLE_CLOSE_S = 600.0
ROOM_IDLE_S = 60.0  # idle this long, the least recently used makes room for a new one


def _local(service: Service) -> list[str]:
    from navi_desktop.memory.store import MemoryStore

    return [p for p, s in service._stores.items() if isinstance(s, MemoryStore)]


async def _closable(service: Service, profile: str, idle_s: float) -> bool:
    if profile == service.profile(None) or service._turns:  # a turn's profile is not named
        return False
    if any(key[0] == profile for key in (*service._ending, *service._timers)):
        return False
    if time.monotonic() - service._used.get(profile, 0.0) < idle_s:
        return False
    store = service._stores[profile]
    try:  # work left to retry keeps it open (the retries look at open ones): a session to
        # end, a forget's scrub of the file or of its backups
        return not (
            await store.sessions_to_process(include_open=True)
            or await store.pending_scrubs()
            or await store.copy_scrubs_pending()
        )
    except NaviError:
        return True  # a file that fails: closing loses nothing, and its next use says why


async def _close(service: Service, profile: str, why: str, checked: float) -> bool:
    """Close ``profile`` unless it was used, or replaced, since ``checked`` (the checks
    await the file: a request may have come meanwhile)."""
    if profile not in service._stores or service._used.get(profile, 0.0) > checked:
        return False
    store = service._stores.pop(profile)
    service._used.pop(profile, None)
    try:
        await store.close()  # waits for a write under way
    except Exception as exc:
        log.warning("closing profile %s (%s): %s", profile, why, exc)
    else:
        log.info("closed profile %s (%s)", profile, why)
    return True


async def close_idle(service: Service, idle_s: float = IDLE_CLOSE_S) -> int:
    """Close the profiles idle for ``idle_s``; how many."""
    closed = 0
    for profile in _local(service):
        checked = time.monotonic()
        if profile in service._stores and await _closable(service, profile, idle_s):
            closed += await _close(service, profile, f"unused for {idle_s:.0f} s", checked)
    return closed


async def release(service: Service, profile: str) -> None:
    """Close ``profile`` now if nothing keeps it open (the start's recovery, done with it)."""
    checked = time.monotonic()
    if profile in service._stores and await _closable(service, profile, 0.0):
        await _close(service, profile, "nothing to recover", checked)


async def make_room(service: Service, profile: str) -> None:
    """Before ``profile`` is opened: room for it, or InvalidInput saying why there is none.
    The configured profile always opens: other clients' profiles never lock the user out."""
    if profile == service.profile(None):
        return
    open_now = _local(service)
    if len(open_now) + len(service._opening) < MAX_OPEN:
        return
    for other in sorted(open_now, key=lambda p: service._used.get(p, 0.0)):
        checked = time.monotonic()
        idle = other in service._stores and await _closable(service, other, ROOM_IDLE_S)
        if idle and await _close(service, other, "room for another", checked):
            return
    raise InvalidInput(
        f"too many memory profiles in use at once ({MAX_OPEN}): one is closed a minute after"
        " its last use; try again then, or stop the daemon (`navi daemon stop`) to close"
        " them all"
    )


def refuse_alias(service: Service, profile: str, path: Path) -> None:
    """Refuse ``profile`` when its file is an open profile's under another name: on a file
    system that ignores case "Work" and "work" are one folder, and a linked folder is
    another way. Two stores on one file would each keep their own sessions, timers and
    search index of it."""
    from navi_desktop.memory.store import MemoryStore

    try:
        st = os.stat(path)  # through a link too: a linked file is the same file
    except OSError:
        return  # a new profile (no file yet), or the open says what is wrong
    file = (st.st_dev, st.st_ino)
    for other, store in list(service._stores.items()):
        if other != profile and isinstance(store, MemoryStore) and store.db.file_identity == file:
            raise InvalidInput(
                f"profile {profile!r} is the open profile {other!r} under another name"
                f" ({path}: a file system that ignores case, or a linked folder):"
                f" use {other!r}"
            )
