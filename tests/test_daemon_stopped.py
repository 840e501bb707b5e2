"""A daemon that runs but does not answer (stopped with SIGSTOP, or busy): `navi daemon
status` said "not running" (exit 3), which a script could take as leave to start another,
and a memory command waited in silence for as long as it stayed stopped."""

from __future__ import annotations

import os
import signal
import time

from tests.daemon_home import navi_home, write_export


def test_status_of_a_daemon_that_does_not_answer_says_it_runs() -> None:
    with navi_home() as h:
        pid = h.start()
        os.kill(pid, signal.SIGSTOP)
        try:
            done = h.navi("daemon", "status")
        finally:
            os.kill(pid, signal.SIGCONT)
        assert done.returncode == 4, (done.stdout, done.stderr)
        assert done.stdout.startswith(f"running      pid {pid}, but not answering within 15 s")
        assert f"kill -CONT {pid}" in done.stdout
        assert h.navi("daemon", "status").returncode == 0  # resumed: answers again


def test_a_command_waiting_on_a_stopped_daemon_says_so_and_goes_on() -> None:
    with navi_home() as h:
        pid = h.start()
        assert h.navi("memory", "add", "likes tea").returncode == 0
        os.kill(pid, signal.SIGSTOP)
        listing = h.popen("memory", "list")
        try:
            time.sleep(12)  # past the 10 s after which it is said
        finally:
            os.kill(pid, signal.SIGCONT)
        out, err = listing.communicate(timeout=60)
        assert listing.returncode == 0 and "likes tea" in out
        assert err.strip() == (
            f"navi: still waiting for the daemon (pid {pid}) after 10 s: it may be busy (a large"
            f" import) or stopped (`kill -CONT {pid}` resumes it); Ctrl+C stops waiting"
        )


def test_status_during_a_long_import_answers_and_names_the_busy_profile(tmp_path) -> None:
    """Its count of waiting sessions read the profile's file behind the import's write, and
    took past the client's 15 s, which then said "not running"."""
    export = write_export(tmp_path / "big.json", 20_000)
    with navi_home() as h:
        h.start()
        assert h.navi("memory", "add", "likes tea").returncode == 0  # the profile is open
        importing = h.popen("memory", "import", str(export))
        try:
            time.sleep(2)  # well into it (20,000 memories take ~10 s here)
            assert importing.poll() is None
            started = time.monotonic()
            status = h.navi("daemon", "status")
            took = time.monotonic() - started
        finally:
            _, err = importing.communicate(timeout=120)
        assert status.returncode == 0, (status.stdout, status.stderr)
        assert took < 10, took
        assert "busy         tester: writing (an import?), not counted above" in status.stdout
        assert importing.returncode == 0, err
