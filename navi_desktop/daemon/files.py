"""The daemon's own files in its private folders: the lock, the log and the socket.

Every file is opened without following a link (``O_NOFOLLOW``) and checked after opening
(a regular file, the user's own, one name only), so nothing planted at these paths is ever
written through. Only a stale socket of the user's own is ever removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import logging
import os
import socket
import stat
import sys
import threading
from pathlib import Path
from typing import Any

from navi_desktop.errors import NaviError
from navi_desktop.fileio import kind, locked, open_regular
from navi_desktop.paths import UnsafePath

log = logging.getLogger(__name__)


def open_private_file(path: Path, flags: int) -> int:
    """Open (creating it 0600 if missing) a file of the daemon's and return the descriptor.

    Refused with :class:`UnsafePath` naming the path: a symbolic link, anything but a
    regular file, another user's file, or a file with other hard links. A looser mode is
    tightened to 0600 through the descriptor."""
    try:
        # O_NONBLOCK: a named pipe planted here must not hang the open.
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(_refusal(path, f"is a symbolic link (to {_target(path)})")) from None
        raise UnsafePath(f"cannot open {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(_refusal(path, f"is {kind(st.st_mode)}, not a regular file"))
        if st.st_uid != os.geteuid():
            raise UnsafePath(
                _refusal(path, f"belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})")
            )
        if st.st_nlink != 1:
            raise UnsafePath(_refusal(path, f"has {st.st_nlink} names (hard links)"))
        if stat.S_IMODE(st.st_mode) != 0o600:
            os.fchmod(fd, 0o600)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _refusal(path: Path, problem: str) -> str:
    return (
        f"refusing {path}: it {problem}; Navi never writes through such a file:"
        " remove it and start again"
    )


def clear_socket_path(path: Path) -> None:
    """Make room for the daemon's socket at ``path``: nothing there, or a stale socket of
    the user's own (nothing listens on it), which is removed. Anything else is refused with
    one line and left as it is: a live daemon's socket, another user's socket, a file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise UnsafePath(
            f"refusing to replace {path}: it is {kind(st.st_mode)}, not a socket; Navi removes"
            " only its own stale socket: move it away and start again"
        )
    if st.st_uid != os.geteuid():
        raise UnsafePath(
            f"refusing to replace {path}: it is a socket of uid {st.st_uid}, not yours"
            f" (uid {os.geteuid()}): remove it and start again"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        log.info("removed the stale socket %s", path)
        return
    except OSError as exc:
        raise NaviError(f"cannot check the existing socket {path}: {exc.strerror or exc}") from exc
    finally:
        probe.close()
    raise NaviError(f"another daemon is already listening on {path}")


LOG_MAX_BYTES = 4 << 20  # then the log's lines move to ``<log>.1``, replacing the older ones


def trim_log(path: Path) -> bool:
    """Keep the daemon's log under LOG_MAX_BYTES: past it, its lines are copied to
    ``<log>.1`` (private, replacing the previous copy) and the log is emptied in place, as
    the daemon appends to it through an inherited descriptor; both under their locks, so
    no line is appended between the copy and the truncate. Unbounded, it grew by every
    request for years, and each forget reads every log file whole to redact it. True when
    it trimmed."""
    try:
        if os.stat(path, follow_symlinks=False).st_size <= LOG_MAX_BYTES:
            return False
        src = open_private_file(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    copy = path.with_name(path.name + ".1")
    problem: OSError | None = None
    try:
        dst = open_private_file(copy, os.O_WRONLY)  # emptied under its lock: a scrub may hold it
        try:
            with locked(src), locked(dst):
                problem = _move_lines(src, dst)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    if problem is not None:  # logged once the lock is let go: the line would wait for it
        with contextlib.suppress(OSError):
            os.unlink(copy)
        log.warning("the log %s was not trimmed: %s", path, problem.strerror or problem)
    return problem is None


def _move_lines(src: int, dst: int) -> OSError | None:
    """Copy the log at ``src`` over ``dst``, then empty it; on a full disk the log stays as
    it is (the half copy is the caller's to remove)."""
    try:
        os.ftruncate(dst, 0)
        while chunk := os.read(src, 1 << 20):
            if os.write(dst, chunk) < len(chunk):  # a short write: the disk is full
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    except OSError as exc:
        return exc
    os.ftruncate(src, 0)  # appends go on at the new end (O_APPEND)
    return None


def scrub_logs(folder: Path, needles: list[str]) -> int:
    """Redact forgotten text from the log files in ``folder`` (the daemon's own log can quote
    a model's failed answer). Rewritten in place under the file's lock, which the daemon
    takes to append each line (``LockedLog``). A thread's work (blocking); returns how many
    occurrences went. Nothing is logged while the lock is held: that line would wait for it."""
    from navi_desktop.memory.matching import Matcher  # the engine: not at the daemon's start

    matcher = Matcher.of(needles)
    total = 0
    for path in sorted(folder.glob("*.log*")) if matcher and folder.is_dir() else []:
        try:  # only a regular file in the folder: never a file outside it through a link
            fd = open_regular(path, os.O_RDWR | os.O_NOFOLLOW)
            with os.fdopen(fd, "r+b") as fh, locked(fd):
                text = fh.read().decode("utf-8", "surrogateescape")
                new, count = matcher.redact(text)
                if count and new is not None:
                    fh.seek(0)
                    fh.write(new.encode("utf-8", "surrogateescape"))
                    fh.truncate()
                    total += count
        except OSError as exc:
            log.warning("could not scrub %s: %s", path, exc.strerror or exc)
    return total


LOG_LOCK_WAIT_S = 5.0  # then a line is written unlocked: a late line beats a daemon that hangs
LOG_LOCK_POLL_S = 0.001  # a scrub or a trim holds it for a moment: a line waits no longer
_WRITING = threading.RLock()


class LockedLog(io.RawIOBase):
    """The daemon's stderr and stdout when they are its log (``start_background``): each
    write holds the log's lock (``locked``), which a scrub or a trim takes to rewrite it.
    The wait is bounded: a line written by the very thread that holds the lock (a warning
    printed while a scrub reads) would otherwise wait forever."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        size = view.nbytes
        # One thread at a time: a lock is the open file's, which stdout and stderr share, so
        # one thread's unlock would free another's write in progress.
        with _WRITING, locked(self.fd, wait_s=LOG_LOCK_WAIT_S, poll_s=LOG_LOCK_POLL_S):
            while view:
                view = view[os.write(self.fd, view) :]
        return size


def lock_log_writes() -> None:
    """In the daemon: its stdout and stderr, when they are a regular file (its log, not a
    terminal), are written through ``LockedLog``, line by line."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            fd = stream.fileno()
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
        except (AttributeError, ValueError, OSError):  # closed, or no descriptor
            continue
        if regular:
            stream.flush()
            locked_stream = io.TextIOWrapper(
                LockedLog(fd), stream.encoding, "backslashreplace", line_buffering=True
            )
            setattr(sys, name, locked_stream)


SPOOL_PREFIX = ".import-"  # an export piped to `navi memory import -`, for the daemon to read


def remove_stale_spools(folder: Path) -> int:
    """At the daemon's start: remove spooled imports a killed CLI left in the run folder (no
    import can be under way before the daemon listens). They hold memories' text, which a
    later forget would not reach."""
    removed = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.name.startswith(SPOOL_PREFIX) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed += 1
    if removed:
        log.info("removed %d spooled import(s) left in %s", removed, folder)
    return removed
