"""`navi memory export -o FILE` and `navi memory backup --to FILE` stopped while they write
leave no copy of the memories behind.

Each writes its copy beside FILE under a temporary name (mode 0600), then renames (an
export) or links (a backup) it into place. Before, SIGTERM or SIGHUP there left that file
for good: a private copy of every memory that no forget reached (a backup's also under a
name no cleaner knew). Now those signals remove it before the process stops, and what
SIGKILL leaves (nothing can catch it) is removed by the next export or backup into that
folder, never a live one's (it holds the folder's lock while it writes).

Real `navi` processes on a real profile file; each is paused at the rename or link by an
audit hook (no code of Navi's replaced), so the signal comes while the temporary file is
there, whole.
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from navi_desktop.memory.backup import backup_problem
from tests import export_support
from tests.copies_support import holds
from tests.daemon_home import navi

SECRET = export_support.SECRET

# `navi ARGS` that stops just before its file is renamed over FILE or linked to it (the audit
# events of os.replace and os.link; FILE: a name, or the start of one), says "writing" on
# stderr, and goes on when a line comes on stdin.
PAUSED = """
import os, runpy, sys
paused = []

def pause(event, args):
    if event not in ("os.rename", "os.link") or paused:
        return
    if os.path.basename(os.fspath(args[1])).startswith({name!r}):
        paused.append(True)
        print("writing", file=sys.stderr, flush=True)
        sys.stdin.readline()

sys.addaudithook(pause)
sys.argv[0] = "navi"
runpy.run_module("navi_desktop", run_name="__main__")
"""


@dataclass(frozen=True)
class Writer:
    """A command that writes a copy of the memories into the file named last."""

    args: tuple[str, ...]
    suffix: str
    said: str  # how its report starts
    left_by: str  # what its leftover is said to be left by

    def whole(self, path: Path) -> bool:
        """``path`` is a whole copy of the two memories."""
        if self.suffix == ".json":
            return len(json.loads(path.read_text())["memories"]) == 2
        return backup_problem(path) is None and holds(path, SECRET)


EXPORT = Writer(("memory", "export", "-o"), ".json", "Exported 2 memories (json) to ", "export")
BACKUP = Writer(("memory", "backup", "--to"), ".db", "Backed up ", "backup or restore")
WRITERS = pytest.mark.parametrize("writer", [EXPORT, BACKUP], ids=["export", "backup"])


environ = export_support.environ
folder = export_support.folder


def written(environ: dict[str, str], writer: Writer, target: Path) -> str:
    """``writer`` into ``target``, which must succeed with a whole copy; its stderr."""
    done = navi(environ, *writer.args, str(target))
    assert done.returncode == 0, done.stderr
    assert writer.whole(target)
    return done.stderr


@contextmanager
def paused(
    environ: dict[str, str], writer: Writer, target: Path, at: str | None = None
) -> Iterator[subprocess.Popen[str]]:
    """``writer`` into ``target``, paused with its temporary file written (``at``: where a
    file named so, or so at its start, is given its name; ``target``'s by default); killed on
    the way out if it still runs then."""
    script = textwrap.dedent(PAUSED).format(name=at or target.name)
    process = subprocess.Popen(
        [sys.executable, "-c", script, *writer.args, str(target)],
        env=environ,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        ready, _, _ = select.select([process.stderr], [], [], 30)  # a writer that blocks fails
        if not ready:
            pytest.fail(f"`navi {' '.join(writer.args)}` did not reach its rename in 30 s")
        line = process.stderr.readline()
        assert line == "writing\n", line + process.stderr.read()
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def temp_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith("."))


def holds_secret(path: Path) -> bool:
    return holds(path, SECRET)


@WRITERS
@pytest.mark.parametrize(
    ("sig", "code"),
    [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGHUP, -signal.SIGHUP), (signal.SIGINT, 130)],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)
def test_a_copy_stopped_by_a_signal_mid_write_leaves_nothing(
    environ: dict[str, str], folder: Path, writer: Writer, sig: signal.Signals, code: int
) -> None:
    target = folder / f"memories{writer.suffix}"
    target.write_text("the export before\n")
    with paused(environ, writer, target) as process:
        (tmp,) = temp_files(folder)  # the copy, whole, under its temporary name
        assert holds_secret(tmp) and tmp.stat().st_mode & 0o777 == 0o600
        process.send_signal(sig)
        _, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    assert "Traceback" not in err, err
    assert temp_files(folder) == []
    assert target.read_text() == "the export before\n"  # left as it was, not half-replaced


@WRITERS
def test_what_a_killed_writer_left_is_removed_by_the_next_one_there(
    environ: dict[str, str], folder: Path, writer: Writer
) -> None:
    with paused(environ, writer, folder / f"memories{writer.suffix}") as process:
        process.kill()  # SIGKILL: nothing in the process runs
        process.communicate(timeout=60)
    (left,) = temp_files(folder)
    assert holds_secret(left)

    said = written(environ, writer, folder / f"other{writer.suffix}")
    assert temp_files(folder) == []
    assert f"removed {left}, left by a stopped {writer.left_by}" in said
    assert not (folder / f"memories{writer.suffix}").exists()


@WRITERS
def test_a_live_writers_temporary_file_is_left_to_it(
    environ: dict[str, str], folder: Path, writer: Writer
) -> None:
    first, second = (folder / f"{name}{writer.suffix}" for name in ("first", "second"))
    with paused(environ, writer, first) as process:
        (writing,) = temp_files(folder)
        written(environ, writer, second)
        assert temp_files(folder) == [writing]  # still being written: not a leftover
        out, err = process.communicate("\n", timeout=60)  # let it finish
    assert process.returncode == 0, err
    assert out.startswith(writer.said)
    assert temp_files(folder) == []
    assert writer.whole(first) and writer.whole(second)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_restore_stopped_while_a_thread_writes_its_copy_leaves_nothing(
    environ: dict[str, str], folder: Path, sig: signal.Signals
) -> None:
    """`navi memory restore` without a daemon writes its copy in a worker thread, and only
    the main thread runs a signal handler: before, SIGTERM there stopped the process at once
    and left the whole copy beside the profile's file, for the next cleaner to find."""
    backup = folder / "before.db"
    written(environ, BACKUP, backup)
    (profile,) = Path(environ["NAVI_HOME"]).rglob("memory.db")
    before = profile.read_bytes()
    restore = Writer(("memory", "restore", "--yes"), ".db", "", "")
    with paused(environ, restore, backup, at=f".{profile.name}.restore-") as process:
        (tmp,) = temp_files(profile.parent)  # the backup's copy, whole, under its own name
        assert holds_secret(tmp)
        process.send_signal(sig)
        _, err = process.communicate(timeout=60)
    assert process.returncode == -sig, err
    assert temp_files(profile.parent) == []
    assert profile.read_bytes() == before
