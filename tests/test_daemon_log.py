"""The daemon's log stays bounded and quiet: it grew by a line per HTTP request to Ollama,
for as long as the daemon ran, and every forget reads each log file whole to redact it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from navi_desktop.daemon import files
from navi_desktop.daemon.files import trim_log
from navi_desktop.paths import UnsafePath
from tests.daemon_home import mode, navi_home


def test_a_log_under_the_limit_is_left_as_it_is(tmp_path: Path) -> None:
    log = tmp_path / "daemon.log"
    log.write_text("a line\n")
    assert trim_log(log) is False and trim_log(tmp_path / "none.log") is False
    assert log.read_text() == "a line\n" and not (tmp_path / "daemon.log.1").exists()


def test_a_long_log_moves_to_its_copy_and_the_writer_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "LOG_MAX_BYTES", 100)
    log = tmp_path / "daemon.log"
    old = tmp_path / "daemon.log.1"
    old.write_text("the run before\n")
    writer = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # the daemon's
    try:
        os.write(writer, b"x" * 150 + b"\n")
        assert trim_log(log) is True
        os.write(writer, b"after\n")
    finally:
        os.close(writer)
    assert log.read_bytes() == b"after\n"  # at the new end, not at the old offset
    assert old.read_bytes() == b"x" * 150 + b"\n"
    assert mode(old) == 0o600


def test_a_link_planted_at_the_copy_is_refused_and_nothing_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "LOG_MAX_BYTES", 10)
    log = tmp_path / "daemon.log"
    log.write_text("secret lines of the log\n")
    target = tmp_path / "elsewhere"
    target.write_text("not the log's\n")
    (tmp_path / "daemon.log.1").symlink_to(target)
    with pytest.raises(UnsafePath, match="symbolic link"):
        trim_log(log)
    assert target.read_text() == "not the log's\n"
    assert log.read_text() == "secret lines of the log\n"


def test_a_start_trims_a_long_log_and_requests_to_ollama_are_not_logged() -> None:
    with navi_home() as h:
        h.state.mkdir(parents=True, exist_ok=True)
        h.log.write_bytes(b"an old line\n" * (files.LOG_MAX_BYTES // 12 + 1))
        h.start()
        assert h.log.stat().st_size < 64 << 10
        assert (h.log.with_name("daemon.log.1")).read_bytes().startswith(b"an old line\n")
        chat = h.navi("chat", "hello there")
        assert chat.returncode == 0, chat.stderr
        text = h.log_text()
        assert "navi daemon" in text and "HTTP Request" not in text


def test_on_a_full_disk_the_log_stays_whole_and_no_half_copy_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_disk_full import fill, small_disk

    monkeypatch.setattr(files, "LOG_MAX_BYTES", 1 << 20)
    with small_disk(tmp_path / "disk", "4m") as disk:
        log = disk / "daemon.log"
        lines = b"".join(b"line %d\n" % i for i in range(200_000))  # ~1.5 MB
        log.write_bytes(lines)
        fill(disk)
        assert trim_log(log) is False
        assert log.read_bytes() == lines
        assert not (disk / "daemon.log.1").exists()


def test_a_link_planted_at_the_copy_does_not_stop_a_start(tmp_path: Path) -> None:
    with navi_home() as h:
        h.state.mkdir(parents=True, exist_ok=True)
        h.log.write_bytes(b"an old line\n" * (files.LOG_MAX_BYTES // 12 + 1))
        target = tmp_path / "elsewhere"
        target.write_text("not the log's\n")
        h.log.with_name("daemon.log.1").symlink_to(target)
        h.start()  # the daemon starts; its log is not trimmed
        assert target.read_text() == "not the log's\n"
        assert h.log.stat().st_size > files.LOG_MAX_BYTES


def test_a_forget_scrubs_the_logs_and_passes_over_a_planted_pipe_or_link(tmp_path: Path) -> None:
    # A link named like a log was followed, and the file outside the folder it points to was
    # rewritten; a named pipe is passed over without waiting for a writer.
    import threading

    from navi_desktop.daemon.files import scrub_logs

    (tmp_path / "daemon.log").write_text("model said: Zorblax4471 is the code\n")
    os.mkfifo(tmp_path / "planted.log")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("Zorblax4471 outside\n")
    (tmp_path / "link.log").symlink_to(outside)
    counted: list[int] = []
    worker = threading.Thread(
        target=lambda: counted.append(scrub_logs(tmp_path, ["Zorblax4471"])), daemon=True
    )
    worker.start()
    worker.join(timeout=20)
    assert counted == [1]
    assert "Zorblax4471" not in (tmp_path / "daemon.log").read_text()
    assert outside.read_text() == "Zorblax4471 outside\n"
