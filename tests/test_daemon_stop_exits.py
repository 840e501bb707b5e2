"""A stopped daemon exits even when a memory file was left open. Each file's connection has
a thread of its own that keeps the process alive until it is closed: a daemon seen in use
had said "stopped listening", given up its lock and socket, and then stayed for over an
hour, holding the profile's file, because one connection nothing had closed was open."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from tests.daemon_home import navi_home

LEAKY_DAEMON = """
import functools
import sys
from navi_desktop.daemon.service import Service
from navi_desktop.memory.store import MemoryStore

listed = Service.sessions_list
held = []  # as a pending open or a task's result holds it: not collected, never closed

@functools.wraps(listed)  # its declared parameters too
async def leaky(self, params, peer):
    # A file opened for a call and never closed: what a call that went away can leave.
    held.append(await MemoryStore.open(self.paths.profile_db("left-open")))
    return await listed(self, params, peer)

Service.sessions_list = leaky
from navi_desktop.cli.main import run
sys.exit(run(["daemon", "run"]))
"""


def test_a_stopped_daemon_exits_though_a_file_was_left_open() -> None:
    with navi_home() as h:
        daemon = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(LEAKY_DAEMON)],
            env=h.environ,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 30
            while not h.socket.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert h.navi("sessions", "list").returncode == 0
            assert h.navi("daemon", "stop").returncode == 0
            assert daemon.wait(timeout=30) == 0  # before: it never exited
        finally:
            if daemon.poll() is None:
                daemon.kill()
        said = daemon.stderr.read()  # a daemon run in the foreground logs there
        assert "closed files nothing else had closed" in said and "left-open/memory.db" in said
