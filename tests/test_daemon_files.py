"""The daemon's folders and files, and trust on the socket both ways: a real ``navi``
subprocess in a throw-away NAVI_HOME, things planted where the daemon keeps its socket, lock
and log, and a second OS user (``nobody``, when the tests run as root)."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from navi_desktop.daemon.client import DaemonClient, DaemonNotTrusted
from tests.daemon_home import Home, mode, navi_home
from tests.nobody import ForeignListener, give_to_nobody, needs_root


@pytest.fixture
def home() -> Iterator[Home]:
    with navi_home() as h:
        yield h


# -- files the daemon writes -------------------------------------------------------------


def test_log_and_lock_are_private_and_a_loose_old_log_is_tightened(home: Home) -> None:
    home.state.mkdir(parents=True, mode=0o755)
    home.state.chmod(0o755)
    home.log.write_text("an older run\n")
    home.log.chmod(0o644)
    started = home.navi("daemon", "start")
    assert started.returncode == 0, started.stderr
    assert mode(home.state) == 0o700 and mode(home.run) == 0o700
    assert mode(home.log) == 0o600 and mode(home.lock) == 0o600
    assert home.log.read_text().startswith("an older run\n")  # appended to, not replaced


@pytest.mark.parametrize("name", ["daemon.lock", "daemon.log"])
def test_a_planted_symlink_is_refused_and_its_target_untouched(home: Home, name: str) -> None:
    victim = home.root / "victim.txt"
    victim.write_text("precious\n")
    for folder in (home.run, home.state):
        folder.mkdir(parents=True, mode=0o700)
    planted = (home.run if name == "daemon.lock" else home.state) / name
    planted.symlink_to(victim)
    line = home.refused("daemon", "start")
    assert str(planted) in line and "symbolic link" in line
    assert victim.read_text() == "precious\n"
    assert planted.is_symlink()
    assert not home.socket.exists()


@pytest.mark.parametrize("folder", ["run", "state"])
def test_a_symlinked_folder_is_refused_and_the_other_folder_left_alone(
    home: Home, folder: str
) -> None:
    other = home.root / "other"
    other.mkdir(mode=0o755)
    other.chmod(0o755)
    link = home.run if folder == "run" else home.state
    link.symlink_to(other, target_is_directory=True)
    line = home.refused("daemon", "start")
    assert str(link) in line and "symbolic link" in line
    assert mode(other) == 0o755 and list(other.iterdir()) == []


@needs_root
@pytest.mark.parametrize("folder", ["run", "state"])
def test_a_folder_of_another_user_is_refused_and_not_changed(home: Home, folder: str) -> None:
    theirs = home.run if folder == "run" else home.state
    theirs.mkdir(mode=0o755)
    theirs.chmod(0o755)
    give_to_nobody(theirs)
    line = home.refused("daemon", "start")
    assert str(theirs) in line and "uid 65534" in line
    assert mode(theirs) == 0o755 and list(theirs.iterdir()) == []


def test_a_file_at_the_socket_path_is_refused_and_kept(home: Home) -> None:
    home.run.mkdir(parents=True, mode=0o700)
    home.socket.write_text("not a socket\n")
    line = home.refused("daemon", "start")
    assert str(home.socket) in line and "not a socket" in line
    assert home.socket.read_text() == "not a socket\n"


def test_a_stale_socket_of_ours_is_replaced(home: Home) -> None:
    home.run.mkdir(parents=True, mode=0o700)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(os.fspath(home.socket))
    stale.close()  # the file stays, nothing listens
    started = home.navi("daemon", "start")
    assert started.returncode == 0, started.stderr
    assert home.navi("daemon", "status").returncode == 0


@needs_root
def test_a_stale_socket_of_another_user_is_left_alone(home: Home) -> None:
    home.run.mkdir(parents=True, mode=0o700)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(os.fspath(home.socket))
    stale.close()
    give_to_nobody(home.socket)
    line = home.refused("daemon", "start")
    assert "uid 65534" in line
    assert stat.S_ISSOCK(os.lstat(home.socket).st_mode)


# -- the client trusts only its own user's daemon ------------------------------------------


@needs_root
def test_the_client_sends_nothing_to_a_socket_of_another_user(home: Home) -> None:
    listener = ForeignListener()
    try:
        home.run.mkdir(parents=True, mode=0o700)
        os.rename(listener.path, home.socket)  # someone else's socket where ours should be
        line = home.refused("chat", "my locker code is 4711")
        assert "refusing to talk to" in line and "uid 65534" in line
        assert listener.received() == 0
    finally:
        listener.close()


@needs_root
async def test_daemon_client_refuses_another_users_socket_before_sending(home: Home) -> None:
    listener = ForeignListener()
    try:
        with pytest.raises(DaemonNotTrusted, match="nothing was sent"):
            await DaemonClient.connect(listener.path)
        assert await asyncio.to_thread(listener.received) == 0
    finally:
        listener.close()


@needs_root
def test_a_runtime_fallback_of_another_user_gives_one_line_with_the_fix(home: Home) -> None:
    if Path(f"/run/user/{os.geteuid()}").is_dir():
        pytest.skip("this system has /run/user/<uid>, so the runtime folder never falls back")
    tmp = home.root / "tmp"
    tmp.mkdir()
    taken = tmp / f"runtime-{os.geteuid()}"
    taken.mkdir(mode=0o700)
    give_to_nobody(taken)
    environ = {k: v for k, v in os.environ.items() if k not in ("NAVI_HOME", "XDG_RUNTIME_DIR")}
    environ |= {"HOME": str(home.root), "TMPDIR": str(tmp), "XDG_STATE_HOME": str(home.root)}
    done = home.navi("daemon", "status", environ=environ)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert str(taken) in lines[0] and "XDG_RUNTIME_DIR" in lines[0]
