"""The daemon's lock and socket, kept in place while it runs.

Something outside Navi may remove or replace them: a cleaner of the run folder, a user
tidying up. A daemon whose socket is gone keeps running, unreachable: every client would
then try to start another, which the lock refuses ("already running"). So the daemon looks
every second: a lost socket is made again (its connections go on), a lost lock is taken
again; when another daemon holds the new lock, or something it must not remove sits at the
socket's path, this daemon stops, and the clients meet the daemon, or the reason, that is
there now.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
from pathlib import Path
from typing import Protocol

from navi_desktop.daemon.files import open_private_file
from navi_desktop.errors import InvalidInput, NaviError
from navi_desktop.paths import ensure_own_dir

log = logging.getLogger("navi.daemon")
PLACE_CHECK_S = 1.0


class DaemonRunning(InvalidInput):
    """A second daemon for the same user was asked to start."""


class Listener(Protocol):
    async def listen_again_if_lost(self) -> bool: ...


class Lock:
    """The user's one-daemon lock (``flock`` on a file in the run folder), holding this
    process's pid for the clients' messages."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = self._take()

    def _take(self) -> int:
        ensure_own_dir(self.path.parent, "run folder")
        fd = open_private_file(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _pid_in(fd) or "?"
            os.close(fd)
            raise DaemonRunning(
                f"a Navi daemon is already running (pid {holder}); stop it with `navi daemon stop`"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        return fd

    def in_place(self) -> bool:
        """Whether the file at the path is still the one this process holds."""
        try:
            there = os.lstat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(self.fd)
        return (there.st_dev, there.st_ino) == (held.st_dev, held.st_ino)

    def take_again(self) -> None:
        """Take the lock at the path again; raises DaemonRunning when another daemon has."""
        fd = self._take()
        os.close(self.fd)
        self.fd = fd

    def release(self) -> None:
        os.close(self.fd)


def _pid_in(fd: int) -> str:
    return os.read(fd, 32).decode(errors="replace").strip()


def holder(path: Path) -> int | None:
    """The pid written in the lock file at ``path`` when that process is alive (None: no
    daemon, as far as a client can tell without taking the lock)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        text = _pid_in(fd)
    finally:
        os.close(fd)
    if not text.isdigit():
        return None
    try:
        os.kill(int(text), 0)
    except (ProcessLookupError, PermissionError):  # gone, or another user's: not ours
        return None
    return int(text)


async def keep_place(lock: Lock, server: Listener, stop: asyncio.Event) -> None:
    """Until the daemon stops: its lock and its socket back in place whenever they go."""
    said = ""  # a problem that lasts is logged once, not every second
    while not stop.is_set():
        await asyncio.sleep(PLACE_CHECK_S)
        try:
            if not lock.in_place():
                lock.take_again()
                log.warning("the lock %s was removed or replaced; taken again", lock.path)
            if await server.listen_again_if_lost():
                log.warning("the socket was removed or replaced; listening again")
        except DaemonRunning:
            log.warning("stopping: another Navi daemon took over %s", lock.path)
            stop.set()
        except NaviError as exc:  # another daemon's socket, or a file planted there
            log.warning("stopping: %s", exc)
            stop.set()
        except OSError as exc:  # a folder made unusable meanwhile: look again later
            if str(exc) != said:
                log.warning("cannot put the daemon's files back: %s", exc)
            said = str(exc)
        else:
            said = ""
