"""The daemon's socket and lock removed or replaced by another program while it runs (a
cleaner of the run folder, a user tidying up). Before, a daemon whose socket was removed
ran on unreachable: every client tried to start another, the lock refused it, and
`navi daemon stop` answered "not running" while it ran.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import time
from pathlib import Path

import pytest

from navi_desktop.daemon import place
from navi_desktop.daemon.client import DaemonClient
from navi_desktop.daemon.main import lock_path, serve, socket_path
from navi_desktop.daemon.place import DaemonRunning
from tests.daemon_home import navi_home
from tests.tui_support import DEAD_HOST, Daemon, make_home


@pytest.fixture(autouse=True)
def quick_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(place, "PLACE_CHECK_S", 0.05)


async def until(check: object, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_removed_socket_is_made_again_and_open_connections_go_on(
    tmp_path: Path,
) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    sock = socket_path(paths)
    daemon = await Daemon(paths).start()
    try:
        async with await DaemonClient.connect(sock) as kept:
            first = os.lstat(sock).st_ino
            sock.unlink()
            await until(lambda: sock.exists())
            assert os.lstat(sock).st_ino != first
            assert (await daemon.call("daemon.status"))["pid"] == os.getpid()
            assert (await kept.call("rpc.ping", {})) is not None  # the old connection
        assert oct(os.lstat(sock).st_mode & 0o777) == oct(0o600)
    finally:
        await daemon.stop()
    assert not sock.exists()  # removed at the end, as the one it bound


async def test_a_file_planted_at_the_socket_path_stops_the_daemon_and_is_left(
    tmp_path: Path,
) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    sock = socket_path(paths)
    daemon = await Daemon(paths).start()
    sock.unlink()
    sock.write_text("not a socket")
    await asyncio.wait_for(daemon._task, 30)  # type: ignore[arg-type]
    assert sock.read_text() == "not a socket"
    # The next start names it, where a daemon still running would have hidden it.
    with pytest.raises(Exception, match="not a socket"):
        await Daemon(paths).start()


async def test_a_removed_run_folder_gets_its_lock_back_and_a_second_daemon_is_refused(
    tmp_path: Path,
) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    daemon = await Daemon(paths).start()
    try:
        shutil.rmtree(paths.runtime)
        await until(lambda: socket_path(paths).exists() and lock_path(paths).exists())
        assert lock_path(paths).read_text() == str(os.getpid())
        assert oct(paths.runtime.stat().st_mode & 0o777) == oct(0o700)
        with pytest.raises(DaemonRunning):
            await serve(paths)
        assert (await daemon.call("daemon.status"))["pid"] == os.getpid()
    finally:
        await daemon.stop()


async def test_a_daemon_whose_lock_another_took_stops(tmp_path: Path) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    daemon = await Daemon(paths).start()
    lock = lock_path(paths)
    lock.unlink()
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)  # as another daemon starting now
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        await asyncio.wait_for(daemon._task, 30)  # type: ignore[arg-type]
    finally:
        os.close(fd)


def test_clients_reach_a_running_daemon_whose_socket_was_removed() -> None:
    with navi_home() as h:
        pid = h.start()
        h.socket.unlink()
        listed = h.navi("memory", "list")  # starts one, refused by the lock: waits for it
        assert listed.returncode == 0, listed.stderr
        assert "using the memory file directly" not in listed.stderr
        h.socket.unlink()
        status = h.navi("daemon", "status")
        assert status.returncode == 0 and f"pid {pid}," in status.stdout, status.stdout
        h.socket.unlink()
        started = h.navi("daemon", "start")
        assert f"already running (pid {pid})" in started.stdout, started.stdout
        h.socket.unlink()
        stopped = h.navi("daemon", "stop")
        assert stopped.stdout.strip() == "stopped", (stopped.stdout, stopped.stderr)
        deadline = time.monotonic() + 30
        while _alive(pid):  # it exits once its socket is gone
            assert time.monotonic() < deadline, "the daemon did not exit"
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie has exited, waiting to be reaped
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False
