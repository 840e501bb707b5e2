"""A scrub or a trim of the daemon's log loses no line the daemon appends meanwhile. Both
rewrite the file in place (read, write, truncate) while the daemon appends to it; a line
appended between the read and the truncate was lost, or cut and run into the next. Here a
real process logs numbered lines through the daemon's own logging as fast as it can while
scrubs (from another process, or from a thread of the writer, as in the daemon) or trims
run over and over: every line is there afterwards, whole and in order."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from navi_desktop.daemon import files
from navi_desktop.daemon.files import scrub_logs, trim_log
from navi_desktop.memory.matching import MARKER

PHRASE = "Zorblax4471"
SCRUBS, TRIMS = 30, 200  # while the lines are written
OLDER = f"an older line quotes {PHRASE}\n" * 3000  # each scrub reads it all: it takes a while
ROOT = Path(__file__).resolve().parents[1]

# Logs numbered lines until the file ``stop`` exists, then prints how many. With "thread",
# a thread of its own scrubs ``rounds`` times meanwhile, then stops it.
WRITER = """
import logging, sys, threading, time
from pathlib import Path

from navi_desktop.daemon.main import start_logging
from navi_desktop.daemon.files import scrub_logs

start_logging()  # as the daemon does: its stderr is the log
folder, in_thread, phrase = Path(sys.argv[1]), sys.argv[2] == "thread", sys.argv[3]
rounds = int(sys.argv[4])
stop = folder / "stop"

def scrub():
    for _ in range(rounds):
        scrub_logs(folder, [phrase])
        time.sleep(0.001)  # as the test's own scrubs: the writer gets its turn
    stop.touch()

log = logging.getLogger("writer")
count = 0
while not stop.exists():
    log.info("line %d quotes %s", count, phrase)
    count += 1
    if count == 1 and in_thread:
        threading.Thread(target=scrub).start()
print(count)
"""


def write_lines(log: Path, scrubs: str, rounds: int, meanwhile: Callable[[], int]) -> int:
    """A process logging numbered lines to ``log`` (its stderr, opened for appending as
    ``start_background`` does) until ``meanwhile`` has done its work ``rounds`` times (or
    its own thread has scrubbed as often); how many."""
    args = [str(log.parent), scrubs, PHRASE, str(rounds)]
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    start = os.fstat(fd).st_size
    try:
        writer = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(WRITER), *args],
            stdout=subprocess.PIPE,
            stderr=fd,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    finally:
        os.close(fd)
    deadline = time.monotonic() + 60
    while log.stat().st_size == start and writer.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    done = 0
    while done < rounds and writer.poll() is None and time.monotonic() < deadline:
        done += meanwhile()
    if scrubs != "thread":
        (log.parent / "stop").touch()
    out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0, log.read_text(errors="replace")[-2000:]
    return int(out)


def scrub_and_pause(folder: Path) -> int:
    """One scrub, then a pause: a scrub holds the log's lock, so back to back they would
    starve the writer (a forget comes once in a while)."""
    scrub_logs(folder, [PHRASE])
    time.sleep(0.001)
    return 1


def in_order(found: list[int], lines: int) -> None:
    missing = sorted(set(range(lines)) - set(found))
    assert not missing, f"{len(missing)} of {lines} lines lost, the first: {missing[:5]}"
    assert found == list(range(lines))


def numbers(text: str, said: str) -> list[int]:
    """The line numbers in ``text``, each line checked whole."""
    line = re.compile(rf"\d{{4}}-\d\d-\d\d [\d:,]+ writer: line (\d+) quotes {re.escape(said)}")
    found = []
    for each in text.splitlines():
        match = line.fullmatch(each)
        assert match, f"a damaged line: {each!r}"
        found.append(int(match[1]))
    return found


def scrub_while_writing(folder: Path, scrubs: str, meanwhile: Callable[[], int]) -> None:
    log = folder / "daemon.log"
    log.write_text(OLDER)
    lines = write_lines(log, scrubs, SCRUBS, meanwhile)
    scrub_logs(folder, [PHRASE])  # the lines written after the last scrub
    text = log.read_text()
    older = OLDER.replace(PHRASE, MARKER)
    assert text.startswith(older) and PHRASE not in text
    in_order(numbers(text[len(older) :], MARKER), lines)


def test_no_line_is_lost_while_another_process_scrubs(tmp_path: Path) -> None:
    scrub_while_writing(tmp_path, "process", lambda: scrub_and_pause(tmp_path))


def test_no_line_is_lost_while_a_thread_of_the_writer_scrubs(tmp_path: Path) -> None:
    scrub_while_writing(tmp_path, "thread", lambda: time.sleep(0.01) or 0)


def test_no_line_is_lost_while_the_log_is_trimmed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "LOG_MAX_BYTES", 1 << 10)
    log = tmp_path / "daemon.log"
    moved: list[bytes] = []  # every copy of the trimmed lines, before the next replaces it

    def trim() -> int:
        if not trim_log(log):
            return 0
        moved.append(log.with_name("daemon.log.1").read_bytes())
        return 1

    lines = write_lines(log, "none", TRIMS, trim)
    assert len(moved) >= TRIMS
    in_order(numbers(b"".join(moved).decode() + log.read_text(), PHRASE), lines)
