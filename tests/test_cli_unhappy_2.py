"""Unhappy paths of the real CLI and daemon, second part: one line naming the cause and the
fix, never a traceback, never "internal error" for a user's condition, never silence.

* Standard output on a full disk: ``navi memory export > file`` wrote a cut export and
  exited 0 (Python's unbuffered stdout drops what a short write left; a buffered one only
  warns at exit that its flush failed).
* Folders under ``umask 000``: the folders above Navi's were made 0777, and another user's
  folder put in place of Navi's ``data`` was used ("No memories.").
* Settings saved on a full or read-only disk: "internal error in settings.set: OSError".
* A TypeError inside a daemon method was answered as the caller's "invalid params".
* ``navi memory show`` on a read-only disk was refused; ``navi sessions`` with
  NAVI_DAEMON=off started the daemon (or said that it could not).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from navi_desktop.daemon.client import RpcCallError, call_sync
from navi_desktop.daemon.rpc import Peer, RpcServer
from tests.daemon_home import (
    CONFIG,
    kill_left_daemon,
    mode,
    navi,
    navi_into,
    offline_environ,
    one_line,
    remount,
)
from tests.nobody import NOBODY_UID, needs_root, run_as_nobody
from tests.test_disk_full import fill, small_disk


def _import(environ: dict[str, str], folder: Path, count: int, size: int = 400) -> None:
    memories = [
        {"id": i, "kind": "fact", "value": f"note {i} " + "x" * size} for i in range(1, count + 1)
    ]
    export = folder / "in.json"
    export.write_text(json.dumps({"format": "navi-memory", "version": 1, "memories": memories}))
    done = navi(environ, "memory", "import", str(export))
    assert done.returncode == 0, done.stderr
    export.unlink()


@contextlib.contextmanager
def _stopped_after(environ: dict[str, str]) -> Iterator[None]:
    """Stop the daemon a test started (by its own `navi daemon stop`; one that does not
    stop, or a start that timed out under load, is killed: none is left running)."""
    try:
        yield
    finally:
        navi({**environ, "NAVI_DAEMON": "on"}, "daemon", "stop")
        kill_left_daemon(Path(environ["NAVI_HOME"]) / "run" / "daemon.lock")


# -- standard output on a full disk ----------------------------------------------------------


@pytest.mark.parametrize("unbuffered", [True, False], ids=["PYTHONUNBUFFERED", "buffered"])
@pytest.mark.parametrize("form", ["json", "markdown"])
def test_an_export_to_a_nearly_full_disk_is_refused_in_one_line_not_cut_silently(
    tmp_path: Path, unbuffered: bool, form: str
) -> None:
    environ = offline_environ(tmp_path / "home")
    environ.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        environ["PYTHONUNBUFFERED"] = "1"
    _import(environ, tmp_path, 300)
    whole = navi(environ, "memory", "export", "--format", form).stdout
    assert len(whole) > 100_000
    with small_disk(tmp_path / "disk", "1m") as disk:
        filler = fill(disk)
        os.truncate(filler, filler.stat().st_size - (64 << 10))  # room for a part of it
        target = disk / "export.out"
        line = one_line(navi_into(target, environ, "memory", "export", "--format", form))
        assert line.startswith(f"navi: cannot write the output: disk full (0.0 MB free in {disk})")
        assert f"{target} is cut short" in line and line.endswith(
            "free some space, or send it to another disk"
        )
        assert 0 < target.stat().st_size < len(whole.encode())


@pytest.mark.parametrize("unbuffered", [True, False], ids=["PYTHONUNBUFFERED", "buffered"])
@pytest.mark.parametrize(
    "argv",
    [
        ["memory", "list"],
        ["memory", "stats"],
        ["memory", "--json", "show", "1"],
        ["memory", "export"],
    ],
    ids=" ".join,
)
def test_output_that_cannot_be_written_is_said_whatever_the_command(
    tmp_path: Path, unbuffered: bool, argv: list[str]
) -> None:
    """/dev/full refuses every write: a short output was kept in the buffer until exit,
    where Python only warned ("Exception ignored") that its flush failed."""
    environ = offline_environ(tmp_path / "home")
    environ.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        environ["PYTHONUNBUFFERED"] = "1"
    assert navi(environ, "memory", "add", "likes tea").returncode == 0
    line = one_line(navi_into(Path("/dev/full"), environ, *argv))
    assert line == (
        "navi: cannot write the output: disk full; it is cut short: free some space, or send"
        " it to another disk"
    )


# -- folders: umask 000, and another user's in place of Navi's ---------------------------------


def _modes(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): mode(p)
        for p in [root, *root.rglob("*")]
        if stat.S_ISDIR(os.lstat(p).st_mode)
    }


@pytest.mark.parametrize(
    ("argv", "daemon"),
    [(["memory", "list"], "off"), (["memory", "add", "a", "b"], "on")],
    ids=["a look, no daemon", "a write, through the daemon"],
)
def test_every_folder_navi_makes_is_private_whatever_the_umask(
    tmp_path: Path, argv: list[str], daemon: str
) -> None:
    """Under `umask 000` the folders above the run and state folders (a missing NAVI_HOME,
    and its missing parents) were made 0777: another user could swap Navi's in them."""
    home = tmp_path / "rt" / "um"
    environ = offline_environ(home, NAVI_DAEMON=daemon)
    with _stopped_after(environ):
        done = subprocess.run(
            [sys.executable, "-m", "navi_desktop", *argv],
            env=environ,
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=lambda: os.umask(0),
        )
        assert done.returncode == 0, done.stderr
    made = _modes(tmp_path / "rt")
    assert {"um", "um/run"} <= made.keys()
    assert made == dict.fromkeys(made, 0o700)


@pytest.fixture
def shared_home() -> Iterator[Path]:
    """A NAVI_HOME with a memory in it, whose folder anyone may write in (as Navi made it
    under `umask 000`), on a path the user nobody can reach."""
    root = Path(tempfile.mkdtemp(prefix="navi-shared-"))
    try:
        root.chmod(0o755)
        home = root / "home"
        assert navi(offline_environ(home), "memory", "add", "likes tea").returncode == 0
        home.chmod(0o777)
        yield home
    finally:
        shutil.rmtree(root, ignore_errors=True)


@needs_root
def test_a_data_folder_another_user_put_in_place_is_refused_not_used(shared_home: Path) -> None:
    mine, theirs = shared_home / "mine", shared_home / "data"

    def swap() -> None:
        os.rename(theirs, mine)
        os.mkdir(theirs)
        os.chmod(theirs, 0o777)

    run_as_nobody(swap)
    environ = offline_environ(shared_home)
    for argv in (["list"], ["add", "likes rain"], ["--json", "export"]):
        for daemon in ("off", "on"):
            with _stopped_after(environ):
                done = navi({**environ, "NAVI_DAEMON": daemon}, "memory", *argv)
            line = one_line(done)
            assert f"refusing the data folder {theirs}: it belongs to uid {NOBODY_UID}" in line, (
                line
            )
            assert line.endswith("move it aside (Navi makes a new one) or set NAVI_HOME")
    assert list(theirs.iterdir()) == []  # nothing written into theirs
    theirs.rmdir()
    mine.rename(theirs)  # NAVI_HOME itself is the user's to choose: not refused
    listed = navi(environ, "memory", "list")
    assert listed.returncode == 0 and "likes tea" in listed.stdout, listed.stderr


@pytest.mark.parametrize("folder", ["config", "data", "data/profiles", "state", "run", "profile"])
def test_a_folder_of_navis_that_others_can_write_in_is_refused(
    shared_home: Path, folder: str
) -> None:
    environ = offline_environ(shared_home)
    with _stopped_after(environ):  # never left running, whatever fails
        assert navi({**environ, "NAVI_DAEMON": "on"}, "daemon", "start").returncode == 0
        assert navi({**environ, "NAVI_DAEMON": "on"}, "daemon", "stop").returncode == 0
    profiles = shared_home / "data" / "profiles"
    where = next(profiles.iterdir()) if folder == "profile" else shared_home / folder
    assert where.is_dir()
    where.chmod(0o777)
    line = one_line(navi(environ, "memory", "add", "likes rain"))
    assert f" {where}: it can be written in by others (mode 0777)" in line, line
    assert line.endswith(f"make it private (`chmod 700 {where}`), or set NAVI_HOME")
    assert mode(where) == 0o777  # left as it is: the user checks it first
    where.chmod(0o700)
    assert navi(environ, "memory", "add", "likes rain").returncode == 0


# -- settings saved on a full or read-only disk -------------------------------------------------


@pytest.fixture
def config_disk(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """A running daemon whose config folder is a small disk of its own."""
    home = tmp_path / "home"
    home.mkdir()
    environ = offline_environ(home, NAVI_DAEMON="on")
    with small_disk(home / "config", "1m") as config:
        (config / "config.toml").write_text(CONFIG)
        with _stopped_after(environ):
            assert navi(environ, "daemon", "start").returncode == 0
            yield environ, config


def _set_theme(environ: dict[str, str]) -> RpcCallError:
    socket = Path(environ["NAVI_HOME"]) / "run" / "daemon.sock"
    with pytest.raises(RpcCallError) as err:
        call_sync(socket, "settings.set", {"changes": {"ui.theme": "textual-light"}})
    return err.value


def test_settings_saved_on_a_full_disk_say_so_not_internal_error(
    config_disk: tuple[dict[str, str], Path],
) -> None:
    environ, config = config_disk
    filler = fill(config)
    err = _set_theme(environ)
    message = str(err)
    assert err.kind == "DiskFull" and "internal error" not in message, message
    assert message.startswith(f"disk full: 0.0 MB free in {config}; the settings were not changed")
    assert message.endswith("free some space, then save again")
    assert sorted(p.name for p in config.iterdir()) == ["config.toml", "filler"]
    assert (config / "config.toml").read_text() == CONFIG
    filler.unlink()  # space is back: the same daemon saves
    socket = Path(environ["NAVI_HOME"]) / "run" / "daemon.sock"
    saved = call_sync(socket, "settings.set", {"changes": {"ui.theme": "textual-light"}})
    assert saved["settings"]["ui"]["theme"] == "textual-light"


def test_settings_saved_on_a_read_only_disk_say_so_not_internal_error(
    config_disk: tuple[dict[str, str], Path],
) -> None:
    environ, config = config_disk
    remount(config, "ro")
    try:
        err = _set_theme(environ)
    finally:
        remount(config, "rw")
    message = str(err)
    assert err.kind == "DiskError" and "internal error" not in message, message
    assert message == (
        f"cannot write {config / 'config.toml'}: its file system is read-only (mounted so, or"
        " made so after a disk error); the settings were not changed: mount it read-write"
        " again (after a disk error, check the disk first: `dmesg`), then save again"
    )
    assert (config / "config.toml").read_text() == CONFIG


# -- a TypeError inside a daemon method --------------------------------------------------------


async def test_a_type_error_inside_a_method_is_an_internal_error_logged(
    sock_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its words ("got an unexpected keyword argument") made it the caller's "invalid
    params", with nothing in the log. So is a handler that does not take (params, peer): a
    bug of the daemon's, never of a caller's (every method the daemon serves is wrapped by
    its parameter model, params.takes or expose, and takes them)."""

    def deeper(*, name: str) -> str:
        return name

    async def buggy(params: dict[str, Any], peer: Peer) -> Any:
        return deeper(nmae="x")  # type: ignore[call-arg]  # the bug under test

    async def no_peer(params: dict[str, Any]) -> Any:  # called with (params, peer)
        return None

    server = RpcServer(sock_path, {"test.buggy": buggy, "test.arity": no_peer})  # type: ignore[dict-item]
    await server.start()
    try:
        with pytest.raises(RpcCallError) as err:
            await asyncio.to_thread(call_sync, sock_path, "test.buggy", {})
        assert err.value.code == -32603
        assert str(err.value) == "internal error in test.buggy: TypeError (see the daemon log)"
        logged = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert any("nmae" in (r.exc_text or "") for r in logged), logged
        with pytest.raises(RpcCallError) as err:
            await asyncio.to_thread(call_sync, sock_path, "test.arity", {})
        assert err.value.code == -32603
        assert str(err.value) == "internal error in test.arity: TypeError (see the daemon log)"
        assert any("no_peer()" in (r.exc_text or "") for r in caplog.records), caplog.records
    finally:
        await server.stop()


# -- a read-only disk: a look at a memory, sessions without the daemon --------------------------


def test_show_on_a_read_only_disk_reads_the_memory(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "32m") as disk:
        environ = offline_environ(disk / "home")
        assert navi(environ, "memory", "add", "likes tea").returncode == 0
        before = {p: p.read_bytes() for p in disk.rglob("*") if p.is_file()}
        remount(disk, "ro")
        try:
            shown = navi(environ, "memory", "show", "1")
            assert shown.returncode == 0 and shown.stderr == "", shown.stderr
            assert shown.stdout.startswith("Memory #1\n") and "likes tea" in shown.stdout
            shown = navi({**environ, "NAVI_DAEMON": "on"}, "memory", "--json", "show", "1")
            assert shown.returncode == 0, shown.stderr  # the daemon cannot start: the file
            assert json.loads(shown.stdout)["memory"]["value"] == "likes tea"
            missing = one_line(navi(environ, "memory", "show", "7"), code=2)
            assert missing == "navi: no memory with id 7"
        finally:
            remount(disk, "rw")
        assert {p: p.read_bytes() for p in disk.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    "argv",
    [["sessions", "list"], ["sessions", "show", "abc"], ["end", "--all"], ["chat", "hi"]],
    ids=" ".join,
)
def test_sessions_with_navi_daemon_off_say_they_need_the_daemon(
    tmp_path: Path, argv: list[str]
) -> None:
    """They started the daemon all the same, and where it could not start (a read-only
    disk) said "the daemon cannot start", as if the user had not turned it off."""
    environ = offline_environ(tmp_path / "home")
    with _stopped_after(environ):
        line = one_line(navi(environ, *argv))
        assert line == (
            f"navi: `navi {' '.join(argv[:2] if argv[0] == 'sessions' else argv[:1])}` needs"
            " the daemon (sessions and chats live in it), which is not running, and"
            " NAVI_DAEMON=off keeps navi from starting it: start it with `navi daemon start`,"
            " or unset NAVI_DAEMON"
        )
        assert not (tmp_path / "home" / "run" / "daemon.lock").exists()  # none started
        # One that runs is used: NAVI_DAEMON=off only keeps navi from starting one.
        assert navi({**environ, "NAVI_DAEMON": "on"}, "daemon", "start").returncode == 0
        listed = navi(environ, "sessions", "list")
        assert listed.returncode == 0 and listed.stderr == "", listed.stderr


def test_sessions_with_navi_daemon_off_on_a_read_only_disk(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "8m") as disk:
        environ = offline_environ(disk / "home")
        assert navi(environ, "memory", "add", "likes tea").returncode == 0
        remount(disk, "ro")
        try:
            line = one_line(navi(environ, "sessions", "list"))
        finally:
            remount(disk, "rw")
        assert "needs the daemon" in line and "NAVI_DAEMON=off" in line, line
        assert "cannot start" not in line
