"""Several `navi daemon start` at once: one daemon runs, and every start names it. Before,
a start whose own child was about to find the lock taken said "started (pid N)" with that
child's pid, a process that had already exited."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.daemon_home import navi_home


def test_starts_racing_all_name_the_daemon_that_runs() -> None:
    with navi_home() as h:
        starts = [
            subprocess.Popen(
                [sys.executable, "-m", "navi_desktop", "daemon", "start"],
                env=h.environ,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        said = [s.communicate(timeout=60) for s in starts]
        assert all(s.returncode == 0 for s in starts), said
        daemon = int(h.lock.read_text().strip())
        os.kill(daemon, 0)  # it runs
        pids = {int(m[1]) for out, _ in said for m in re.finditer(r"pid (\d+)", out)}
        assert pids == {daemon}, said
