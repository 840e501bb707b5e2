"""An export larger than a request may be (8 MiB) imports through the daemon: the daemon reads
it from its path (a piped one from a private file the CLI removes after). Before, the
README's own round trip, `navi memory export -o f && navi memory import f`, failed with
"request too large" for any profile past ~20,000 memories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from navi_desktop.daemon.client import RpcCallError
from tests.daemon_home import navi_home
from tests.tui_support import DEAD_HOST, Daemon, make_home


def export_of(n: int) -> dict:
    memories = [
        {
            "id": i,
            "kind": "fact",
            "value": f"note {i} " + "x" * 420,
            "created_at": "2026-01-01T00:00:00Z",
        }
        for i in range(1, n + 1)
    ]
    return {"format": "navi-memory", "version": 1, "memories": memories}


def test_a_large_export_round_trips_through_the_daemon(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps(export_of(11_000)))
    assert big.stat().st_size > 4 << 20  # past what goes in a request
    with navi_home() as h:
        done = h.navi("memory", "import", str(big))
        assert done.returncode == 0, done.stderr
        assert "11000 added" in done.stdout
        out = tmp_path / "out.json"
        assert h.navi("memory", "export", "-o", str(out)).returncode == 0
        piped = subprocess.run(
            [sys.executable, "-m", "navi_desktop", "memory", "import", "-"],
            stdin=out.open("rb"),
            env=h.environ,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert piped.returncode == 0, piped.stderr
        assert "0 added, 11000 skipped" in piped.stdout
        assert [p.name for p in h.run.iterdir() if p.name.startswith(".import-")] == []
        assert "navi daemon" in h.log_text()  # it went through the daemon


async def test_the_daemon_reads_only_a_regular_file(tmp_path: Path) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    daemon = await Daemon(paths).start()
    try:
        for path, words in [
            (fifo, "it is not a regular file"),
            (tmp_path, "it is a folder"),
            (tmp_path / "nope.json", "No such file"),
        ]:
            with pytest.raises(RpcCallError) as err:
                await daemon.call("memory.import_file", {"args": [str(path)]})
            assert f"cannot read {path}: {words}" in str(err.value)
        good = tmp_path / "good.json"
        good.write_text(json.dumps(export_of(3)))
        report = await daemon.call("memory.import_file", {"args": [str(good)]})
        assert report["added"] == 3
    finally:
        await daemon.stop()


async def test_a_spooled_import_a_killed_cli_left_is_removed_at_the_start(tmp_path: Path) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    paths.runtime.mkdir(parents=True, mode=0o700)
    left = paths.runtime / ".import-abc123.json"
    left.write_text(json.dumps(export_of(2)))
    other = paths.runtime / "notes.json"  # not ours: stays
    other.write_text("{}")
    daemon = await Daemon(paths).start()
    try:
        assert not left.exists() and other.exists()
    finally:
        await daemon.stop()


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    from navi_desktop.errors import InvalidInput
    from navi_desktop.memory.export_file import MAX_IMPORT_BYTES, read_export_file

    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:  # sparse: no disk used, and nothing read
        f.truncate(MAX_IMPORT_BYTES + 1)
    with pytest.raises(InvalidInput, match="larger than 1024 MiB"):
        read_export_file(huge)


def test_a_piped_import_on_a_full_disk_is_one_line_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from navi_desktop.cli.transfer import spooled
    from navi_desktop.errors import DiskFull
    from tests.test_disk_full import fill, small_disk

    with small_disk(tmp_path / "disk", "4m") as disk:
        monkeypatch.setenv("NAVI_HOME", str(disk / "home"))
        fill(disk)
        with pytest.raises(DiskFull, match="disk full"), spooled(b"{}" * (1 << 20)):
            pass
        run = disk / "home" / "run"
        assert not [p for p in run.iterdir() if p.name.startswith(".import-")]
