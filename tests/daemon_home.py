"""A throw-away NAVI_HOME for tests that run ``navi`` and its daemon as subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from navi_desktop.paths import Paths
from tests.fake_ollama import ThreadedFakeOllama
from tests.pipeline_helpers import MODELS

CONFIG = '[ollama]\nchat_model = "llama3.2"\n[memory]\nembedder = "none"\nprofile = "tester"\n'


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def navi(
    environ: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``navi *args`` as a subprocess with ``environ``; its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "navi_desktop", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def navi_into(path: Path, environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``navi *args`` with its standard output written to ``path``; stderr captured."""
    with path.open("w") as out:
        return subprocess.run(
            [sys.executable, "-m", "navi_desktop", *args],
            env=environ,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )


def one_line(
    done: subprocess.CompletedProcess[str], code: int = 1, *, after_daemon_line: bool = False
) -> str:
    """The one line a refused command says on stderr. ``after_daemon_line``: a line before it
    says that the daemon cannot start and the memory file is used directly."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    if after_daemon_line:
        assert len(lines) == 2, done.stderr
        assert lines[0].startswith("navi: the daemon cannot start: "), done.stderr
        assert lines[0].endswith("; using the memory file directly"), done.stderr
        lines = lines[1:]
    assert len(lines) == 1 and lines[0].startswith("navi: "), done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    return lines[0]


def remount(mount: Path, mode: str) -> None:
    """Mount ``mount`` again with ``mode`` ("ro", "rw"); the test is skipped where it cannot."""
    done = subprocess.run(
        ["mount", "-o", f"remount,{mode}", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot remount {mount} {mode}: {done.stderr.strip()}")


def offline_environ(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``navi`` with its NAVI_HOME at ``home``, no daemon and no model
    host (nothing listens at port 9); ``extra`` added last."""
    environ = {**os.environ, "NAVI_HOME": str(home), "OLLAMA_HOST": "http://127.0.0.1:9"}
    return environ | {"NAVI_EMBEDDER": "none", "NAVI_DAEMON": "off", **extra}


def offline_profile(home: Path, *memories: str) -> dict[str, str]:
    """``offline_environ(home)``, whose profile holds ``memories``, added here."""
    environ = offline_environ(home)
    for value in memories:
        assert navi(environ, "memory", "add", value).returncode == 0
    return environ


def kill_left_daemon(lock: Path) -> None:
    """SIGKILL the daemon named in ``lock`` if it still runs (a stop that did not finish, a
    start that timed out under load): a test leaves none behind. The lock keeps the pid after
    a stop, so the process is checked to be a Navi daemon first (the pid may be reused)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(lock.read_text() or 0) if lock.is_file() else 0
        command = Path(f"/proc/{pid}/cmdline").read_bytes() if pid else b""
        if b"navi_desktop" in command and b"daemon" in command:
            os.kill(pid, signal.SIGKILL)


def write_export(path: Path, count: int) -> Path:
    """An export of ``count`` facts (~250 bytes each): a long import, to act during."""
    memories = [
        {"id": i, "kind": "fact", "value": f"note {i} " + "x" * 200} for i in range(1, count + 1)
    ]
    path.write_text(json.dumps({"format": "navi-memory", "version": 1, "memories": memories}))
    return path


class Home:
    """A NAVI_HOME, the environment for ``navi`` subprocesses, and the fake Ollama."""

    def __init__(self, root: Path, fake: ThreadedFakeOllama, name: str = "h") -> None:
        self.root = root
        self.fake = fake
        self.home = root / name
        (self.home / "config").mkdir(parents=True)
        (self.home / "config" / "config.toml").write_text(CONFIG)
        self.environ = {**os.environ, "NAVI_HOME": str(self.home), "OLLAMA_HOST": fake.url}
        self.paths = Paths.from_env(self.environ)
        self.run = self.paths.runtime
        self.state = self.paths.state
        self.socket = self.run / "daemon.sock"
        self.lock = self.run / "daemon.lock"
        self.log = self.state / "daemon.log"

    def navi(self, *args: str, environ: dict[str, str] | None = None) -> Any:
        return navi(environ or self.environ, *args)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        """``navi *args`` started, not waited for; its output captured as text."""
        return subprocess.Popen(
            [sys.executable, "-m", "navi_desktop", *args],
            env=self.environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def start(self) -> int:
        started = self.navi("daemon", "start")
        assert started.returncode == 0, started.stderr
        return int(self.lock.read_text().strip())

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def refused(self, *args: str) -> str:
        """Run ``navi``, which must fail with one line on stderr and no traceback."""
        done = self.navi(*args)
        assert done.returncode == 1, (done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("navi: "), done.stderr
        return lines[0]


@contextlib.contextmanager
def navi_home(name: str = "h") -> Iterator[Home]:
    """``name``: the NAVI_HOME folder's own name (any bytes, as ``os.fsdecode`` gives them)."""
    root = Path(tempfile.mkdtemp(prefix="navi-files-"))  # short: socket paths are limited
    fake = ThreadedFakeOllama(MODELS).start()
    h = Home(root, fake, name)
    try:
        yield h
    finally:
        if h.socket.exists() and not h.socket.is_symlink():
            h.navi("daemon", "stop")
        kill_left_daemon(h.lock)
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
