"""More unhappy paths of the real CLI: one line naming the cause and the fix, never a
traceback, never silence.

* ``navi memory doctor`` (plain, ``--file``, ``--recover``) and ``navi memory backup`` (plain,
  ``--to DIR``) on a profile whose folder the user cannot search: pathlib's ``exists()`` and
  ``is_file()`` raise PermissionError for that, which came out as a traceback. Run as the OS
  user ``nobody`` (from root, in a forked child), and as any user in a subprocess: the
  folder's mode 000 stops a plain user, and root too once the subprocess gives up the
  capabilities that let root pass (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH).
* ``navi memory export -o ""`` said "cannot write : it is a folder".
"""

from __future__ import annotations

import asyncio
import errno
import io
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from navi_desktop.memory.store import MemoryStore
from navi_desktop.paths import Paths
from tests.nobody import NOBODY_GID, NOBODY_UID, needs_root, run_as_nobody

PROFILE = "p"
# Each command, with {db} the profile's file and {out} a folder of the user's own.
COMMANDS = {
    "doctor": ["doctor"],
    "doctor --file": ["doctor", "--file", "{db}"],
    "doctor --recover": ["doctor", "--recover"],
    "backup": ["backup"],
    "backup --to": ["backup", "--to", "{out}"],
    # These said so before, but named memory.db-wal, and the wrong folder when a higher one
    # was the locked one.
    "list": ["list"],
    "export": ["export"],
}
# Without these capabilities root meets the mode bits as any other user does.
DROP_DAC = "-dac_override,-dac_read_search"
SETPRIV = ["setpriv", f"--inh-caps={DROP_DAC}", f"--bounding-set={DROP_DAC}"]


class Locked:
    """A NAVI_HOME whose profile ``p`` has a memory in it, and a folder for ``--to``; the
    profile's folder gets mode 000 (:meth:`lock`) and back (:meth:`unlock`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.db = Paths.from_env({"NAVI_HOME": str(self.home)}).profile_db(PROFILE)
        self.folder = self.db.parent
        self.out = root / "out"
        self.out.mkdir()
        asyncio.run(_add(self.db, "likes tea"))
        self.before = sorted(os.listdir(self.folder))

    def argv(self, name: str) -> list[str]:
        words = [w.format(db=self.db, out=self.out) for w in COMMANDS[name]]
        return ["memory", "--profile", PROFILE, *words]

    def environ(self) -> dict[str, str]:
        return {"NAVI_HOME": str(self.home), "NAVI_DAEMON": "off", "NAVI_EMBEDDER": "none"}

    def lock(self) -> None:
        self.folder.chmod(0)

    def unlock(self) -> None:
        self.folder.chmod(0o700)

    def check_refusal(self, code: int, out: str, err: str, name: str) -> None:
        """One line naming the folder, the cause and the chmod that fixes it; nothing done."""
        assert "Traceback" not in err, err
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        line = lines[0]
        assert line.startswith("navi: cannot use ") and str(self.db) in line, line
        assert f"permission denied on its folder {self.folder}" in line, line
        assert f"`chmod u+rwx {self.folder}`" in line, line
        assert out == ""
        # the profile's file cannot be used, as `memory list` says (2)
        assert code == 2, (code, line)
        self.unlock()
        assert sorted(os.listdir(self.folder)) == self.before  # no backup, no recovered file
        assert os.listdir(self.out) == []


async def _add(path: Path, text: str) -> None:
    async with await MemoryStore.open(path) as store:
        await store.add_memory(text)


@pytest.fixture
def locked() -> Iterator[Locked]:
    # Under /tmp, open to all: nobody must reach it (pytest's own folders are 0700).
    root = Path(tempfile.mkdtemp(prefix="navi-locked-"))
    root.chmod(0o755)
    try:
        yield Locked(root)
    finally:
        for dirpath, _, _ in os.walk(root):
            os.chmod(dirpath, 0o700)
        shutil.rmtree(root, ignore_errors=True)


# -- as nobody ---------------------------------------------------------------------------------


def _as_nobody(argv: list[str], environ: dict[str, str]) -> dict[str, Any]:
    """``navi ARGV`` (the real CLI, in-process) in a forked child whose uid is nobody's; its
    exit code, stdout and stderr come back (what escaped it fails the test). A child made
    by ``setpriv --reuid`` cannot run this interpreter when it lives under /root (0700)."""
    from navi_desktop.cli.main import run

    def work() -> dict[str, Any]:
        os.environ.update(environ)
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        code = run(argv)
        return {"code": code, "out": sys.stdout.getvalue(), "err": sys.stderr.getvalue()}

    return run_as_nobody(work)


def _warm_up(name: str, tmp: Path) -> None:
    """Run the command once as root on a healthy profile: the modules it imports as it runs
    are loaded before the child, which cannot read the interpreter's folder, needs them."""
    from navi_desktop.cli.main import run

    warm = Locked(tmp)
    old = {k: os.environ.get(k) for k in warm.environ()}
    os.environ.update(warm.environ())
    try:
        run(warm.argv(name))
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@needs_root
@pytest.mark.parametrize("name", list(COMMANDS))
def test_doctor_and_backup_as_nobody_name_the_folder_and_the_fix(
    name: str, locked: Locked, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _warm_up(name, tmp_path)
    capsys.readouterr()
    for dirpath, _, files in os.walk(locked.root):
        os.chown(dirpath, NOBODY_UID, NOBODY_GID)
        for file in files:
            os.chown(os.path.join(dirpath, file), NOBODY_UID, NOBODY_GID)
    locked.lock()
    result = _as_nobody(locked.argv(name), locked.environ())
    locked.check_refusal(result["code"], result["out"], result["err"], name)


# -- as any user -------------------------------------------------------------------------------


def _unprivileged() -> list[str]:
    """The prefix that makes a folder's mode 000 refuse this user: none for a plain user;
    for root, setpriv without the capabilities that pass over the mode bits."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("root passes over mode 000 and setpriv (util-linux) is not here to stop it")
    probe = Path(tempfile.mkdtemp(prefix="navi-probe-"))
    try:
        probe.chmod(0)
        seen = subprocess.run([*SETPRIV, "test", "-x", str(probe)], capture_output=True)
    finally:
        probe.chmod(0o700)
        probe.rmdir()
    if seen.returncode == 0:  # no CAP_SETPCAP here, or setpriv did not drop them
        pytest.skip("root passes over mode 000 and setpriv cannot drop CAP_DAC_OVERRIDE here")
    return SETPRIV


@pytest.mark.parametrize("name", list(COMMANDS))
def test_doctor_and_backup_without_search_permission_name_the_folder_and_the_fix(
    name: str, locked: Locked
) -> None:
    prefix = _unprivileged()
    locked.lock()
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "navi_desktop", *locked.argv(name)],
        env={**os.environ, **locked.environ()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    locked.check_refusal(done.returncode, done.stdout, done.stderr, name)


def test_make_backup_without_search_permission_names_the_folder(locked: Locked) -> None:
    # `navi memory backup` looks for the file before make_backup does (cli/doctor.py); the
    # daemon's daily backup and other callers meet make_backup's own look.
    prefix = _unprivileged()
    locked.lock()
    code = (
        "import sys\nfrom navi_desktop.memory.backup import make_backup\n"
        "try:\n    make_backup(sys.argv[1])\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)"
    )
    done = subprocess.run(
        [*prefix, sys.executable, "-c", code, str(locked.db)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stderr == ""
    assert done.stdout.startswith(f"ProfileUnreadable cannot use {locked.db}: "), done.stdout
    assert f"`chmod u+rwx {locked.folder}`" in done.stdout
    locked.unlock()
    assert sorted(os.listdir(locked.folder)) == locked.before


# -- navi memory export -o "" ------------------------------------------------------------------


@pytest.mark.parametrize("option", [["-o", ""], ["--output="]])
def test_export_to_an_empty_path_says_the_path_is_empty(cli, home, option: list[str]) -> None:
    assert cli("add", "likes tea")[0] == 0
    before = sorted(p.name for p in Path.cwd().iterdir())
    code, out, err = cli("export", *option)
    assert code == 2 and out == "", (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0] == (
        "navi: the output path is empty (-o ''): give the file to write, as in"
        " -o memories.json, or leave -o out to print the export"
    )
    assert sorted(p.name for p in Path.cwd().iterdir()) == before


def test_a_backup_to_an_empty_path_says_the_path_is_empty(cli, home) -> None:
    """Before, ``--to ''`` (a script's empty variable) quietly meant the default place."""
    assert cli("add", "likes tea")[0] == 0
    code, out, err = cli("backup", "--to", "")
    assert code == 2 and out == "", (code, out, err)
    assert err.strip() == (
        "navi: the backup's path is empty (--to ''): give a file or folder, or leave --to out"
        " for the profile's backups folder"
    )
    assert not list(home.rglob("backups/*.db"))  # nothing was written


@pytest.mark.parametrize(
    ("err", "line"),
    [
        (TimeoutError(), "an operation failed: it timed out; try again"),
        (
            ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
            "an operation failed: connection refused; try again",
        ),
        (
            OSError(errno.ENOSPC, "No space left on device", "/data/navi/memory.db"),
            "cannot use /data/navi/memory.db: no space left on device: free some space, then"
            " try again",
        ),
        (
            OSError(errno.EACCES, "Permission denied", "/data/navi/memory.db"),
            "cannot use /data/navi/memory.db: permission denied: give your user access to it"
            " (e.g. `chmod u+rw /data/navi/memory.db`), then try again",
        ),
        (
            OSError(errno.EIO, "Input/output error", b"/data/navi/memory.db"),
            "cannot use /data/navi/memory.db: input/output error: check that path, then try again",
        ),
    ],
)
def test_an_os_error_no_command_named_gets_one_line_with_its_fix(err, line, tmp_path) -> None:
    """The last net under every command: each kind of error says its cause and its fix."""
    from navi_desktop.cli.main import os_error_line

    if err.filename is not None:  # in a folder that is there (and open to this user)
        err.filename = str(tmp_path / "memory.db")
        line = line.replace("/data/navi/memory.db", err.filename)
    assert os_error_line(err) == line


@needs_root
def test_a_permission_error_under_a_closed_folder_names_that_folder() -> None:
    """Refused by a folder on the way, the line names the folder and the chmod that opens it,
    not the file (whose own mode is not the cause)."""
    import navi_desktop.memory.failures  # noqa: F401 - nobody cannot import it
    from navi_desktop.cli.main import os_error_line

    with tempfile.TemporaryDirectory() as top:  # not under pytest's own 0700 folder
        Path(top).chmod(0o755)
        closed = Path(top) / "closed"
        (closed / "inner").mkdir(parents=True)
        closed.chmod(0o700)  # root's: nobody cannot pass it
        path = closed / "inner" / "memory.db"
        err = OSError(errno.EACCES, "Permission denied", str(path))
        line = run_as_nobody(lambda: os_error_line(err))
    assert line == (
        f"cannot use {path}: permission denied on the folder {closed}: give your user access"
        f" to it (e.g. `chmod u+rwx {closed}`), then try again"
    )
