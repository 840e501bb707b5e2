"""A second OS user for tests: ``nobody``, reached by ``os.setuid`` in a forked child, which
needs root. Tests that need it are skipped with the reason otherwise."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import select
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    _NOBODY = pwd.getpwnam("nobody")
    NOBODY_UID, NOBODY_GID = _NOBODY.pw_uid, _NOBODY.pw_gid
except KeyError:  # pragma: no cover - every Unix we run on has one
    NOBODY_UID = NOBODY_GID = -1

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or NOBODY_UID < 0,
    reason="needs root to act as a second user (nobody) through os.setuid",
)


def run_as_nobody(work: Callable[[], Any]) -> Any:
    """``work()`` in a forked child whose uid is nobody's; its JSON result comes back, and
    what escaped it fails the test. The child cannot read an interpreter's folder under
    /root: the caller imports first what ``work`` needs."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(NOBODY_GID)
            os.setuid(NOBODY_UID)
            out = {"result": work()}
        except BaseException as exc:  # reported to the parent, which fails the test
            out = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    out = json.loads(data)
    assert "error" not in out, out["error"]
    return out["result"]


def give_to_nobody(path: Path) -> None:
    os.chown(path, NOBODY_UID, NOBODY_GID, follow_symlinks=False)


class ForeignListener:
    """A Unix socket listening as ``nobody`` in a forked child. It accepts one connection
    and reports how many bytes it received on it (:meth:`received`)."""

    def __init__(self) -> None:
        # A folder of nobody's own, on a path nobody can reach (the tests' folders are 0700).
        self.folder = Path(tempfile.mkdtemp(prefix="navi-nobody-"))
        give_to_nobody(self.folder)
        self.path = self.folder / "listener.sock"
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: nobody from here on, and it never returns
            code = 0
            try:
                os.close(read_end)
                os.setgroups([])
                os.setgid(NOBODY_GID)
                os.setuid(NOBODY_UID)
                server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                server.bind(os.fspath(self.path))
                server.listen(1)
                os.write(write_end, b"ready\n")
                server.settimeout(30)
                conn, _ = server.accept()
                conn.settimeout(2)
                total = 0
                try:
                    while data := conn.recv(65536):
                        total += len(data)
                except OSError:
                    pass
                os.write(write_end, f"{total}\n".encode())
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(write_end)
        self.pid = pid
        self._pipe = read_end
        assert self._line() == "ready", "the listener did not start"

    def _line(self, timeout: float = 30.0) -> str:
        data = b""
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([self._pipe], [], [], timeout)
            assert ready, "no word from the listener in time"
            chunk = os.read(self._pipe, 64)
            assert chunk, "the listener exited"
            data += chunk
        return data.decode().strip()

    def received(self) -> int:
        """Bytes the listener got on its one connection (waits for the connection to end)."""
        try:
            return int(self._line())
        finally:
            self.close()

    def close(self) -> None:
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
            os.close(self._pipe)
            self.pid = 0
        shutil.rmtree(self.folder, ignore_errors=True)


@contextlib.contextmanager
def lock_held_by_nobody(folder: Path, how: int) -> Iterator[None]:
    """``folder``'s lock (``flock``, ``how``) held by a process of nobody's, which opens the
    folder itself, until the block ends."""
    ready_read, ready_write = os.pipe()
    hold_read, hold_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: nobody from here on, and it never returns
        code = 1
        try:
            os.close(ready_read)
            os.close(hold_write)
            os.setgroups([])
            os.setgid(NOBODY_GID)
            os.setuid(NOBODY_UID)
            fcntl.flock(os.open(folder, os.O_RDONLY | os.O_DIRECTORY), how)
            os.write(ready_write, b"held\n")
            os.read(hold_read, 1)  # until the parent closes its end
            code = 0
        finally:
            os._exit(code)
    os.close(ready_write)
    os.close(hold_read)
    try:
        ready, _, _ = select.select([ready_read], [], [], 30)
        assert ready and os.read(ready_read, 64) == b"held\n", "nobody did not take the lock"
        yield
    finally:
        os.close(hold_write)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(ready_read)
