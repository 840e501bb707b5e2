"""`navi memory export -o FILE` stopped while it writes leaves no copy of the memories behind.

The export is written beside FILE under a temporary name (mode 0600), then renamed over it.
Before, SIGTERM or SIGHUP there left that file for good: a private copy of every memory that
no forget reached. Now those signals remove it before the process stops, and what SIGKILL
leaves (nothing can catch it) is removed by the next export into that folder, never a live
export's (it holds the folder's lock while it writes).

Real `navi` processes on a real profile file; each is paused at the rename by an audit hook
(no code of Navi's replaced), so the signal comes while the temporary file is there, whole.
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import export_support
from tests.daemon_home import navi

# The fixtures, found by pytest by their names.
environ = export_support.environ
folder = export_support.folder

SECRET = export_support.SECRET  # in the profile of the environ fixture

# `navi ARGS` that stops just before the export's file is renamed over FILE (the audit event
# of os.replace), says "writing" on stderr, and goes on when a line comes on stdin.
PAUSED = """
import os, runpy, sys
paused = []

def pause(event, args):
    if event == "os.rename" and not paused and os.path.basename(os.fspath(args[1])) == {name!r}:
        paused.append(True)
        print("writing", file=sys.stderr, flush=True)
        sys.stdin.readline()

sys.addaudithook(pause)
sys.argv[0] = "navi"
runpy.run_module("navi_desktop", run_name="__main__")
"""


def exported(environ: dict[str, str], target: Path) -> str:
    """`navi memory export -o target`, which must succeed; its stderr."""
    done = navi(environ, "memory", "export", "-o", str(target))
    assert done.returncode == 0, done.stderr
    return done.stderr


def paused_export(environ: dict[str, str], target: Path) -> subprocess.Popen[str]:
    """`navi memory export -o target`, paused with its temporary file written."""
    script = textwrap.dedent(PAUSED).format(name=target.name)
    export = subprocess.Popen(
        [sys.executable, "-c", script, "memory", "export", "-o", str(target)],
        env=environ,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert export.stderr is not None
    ready, _, _ = select.select([export.stderr], [], [], 30)  # an export that blocks fails
    if not ready:
        export.kill()
        pytest.fail("the export did not reach its rename in 30 s")
    line = export.stderr.readline()
    assert line == "writing\n", line + export.stderr.read()
    return export


def temp_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith("."))


def holds_secret(path: Path) -> bool:
    return SECRET in path.read_text()


@pytest.mark.parametrize(
    ("sig", "code"),
    [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGHUP, -signal.SIGHUP), (signal.SIGINT, 130)],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)
def test_an_export_stopped_by_a_signal_mid_write_leaves_nothing(
    environ: dict[str, str], folder: Path, sig: signal.Signals, code: int
) -> None:
    target = folder / "memories.json"
    target.write_text("the export before\n")
    export = paused_export(environ, target)
    try:
        (tmp,) = temp_files(folder)  # the export, whole, under its temporary name
        assert holds_secret(tmp) and tmp.stat().st_mode & 0o777 == 0o600
        export.send_signal(sig)
        _, err = export.communicate(timeout=60)
    finally:
        if export.poll() is None:
            export.kill()
            export.wait()
    assert export.returncode == code, err
    assert "Traceback" not in err, err
    assert temp_files(folder) == []
    assert target.read_text() == "the export before\n"  # left as it was, not half-replaced


def test_what_a_killed_export_left_is_removed_by_the_next_export_there(
    environ: dict[str, str], folder: Path
) -> None:
    export = paused_export(environ, folder / "memories.json")
    export.kill()  # SIGKILL: nothing in the process runs
    export.communicate(timeout=60)
    (left,) = temp_files(folder)
    assert holds_secret(left)

    said = exported(environ, folder / "other.json")
    assert temp_files(folder) == []
    assert f"removed {left}, left by a stopped export" in said
    assert not (folder / "memories.json").exists()
    assert len(json.loads((folder / "other.json").read_text())["memories"]) == 2


def test_a_live_exports_temporary_file_is_left_to_it(environ: dict[str, str], folder: Path) -> None:
    export = paused_export(environ, folder / "first.json")
    try:
        (writing,) = temp_files(folder)
        exported(environ, folder / "second.json")
        assert temp_files(folder) == [writing]  # still being written: not a leftover
        out, err = export.communicate("\n", timeout=60)  # let it finish
    finally:
        if export.poll() is None:
            export.kill()
            export.wait()
    assert export.returncode == 0, err
    assert out.startswith("Exported 2 memories (json) to ")
    assert temp_files(folder) == []
    for name in ("first.json", "second.json"):
        assert len(json.loads((folder / name).read_text())["memories"]) == 2
