"""`navi memory export -o FILE` into a shared folder (like /tmp) whose lock another user holds.

An export holds its folder's lock, shared, while it writes, so that another export's cleaner
leaves its temporary file alone. Anyone who can open a folder can take its lock: before, a
user who held that of /tmp made `navi memory export -o /tmp/mine.json` (and the app's export)
wait for ever. Now a writer waits for the lock only a moment, then writes without it, and the
cleaner never waits: in such a folder it removes nothing while another holds the lock, and
then only this user's own leftovers, never another's file nor through a link.

Real `navi` processes; the lock is held by a process of the user nobody.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import export_support
from tests.daemon_home import navi
from tests.nobody import give_to_nobody, lock_held_by_nobody, needs_root

# The fixtures, found by pytest by their names.
environ = export_support.environ

pytestmark = needs_root


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user may write in, sticky, as /tmp is (outside the test's own 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="navi-shared-"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def export(environ: dict[str, str], target: Path) -> str:
    """`navi memory export -o target`, which must finish soon and succeed; its stderr."""
    done = navi(environ, "memory", "export", "-o", str(target), timeout=30)  # a hang fails
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert len(json.loads(target.read_text())["memories"]) == 2
    return done.stderr


@pytest.mark.parametrize("how", [fcntl.LOCK_EX, fcntl.LOCK_SH], ids=["exclusive", "shared"])
def test_an_export_into_a_folder_another_user_locks_is_written_whole(
    environ: dict[str, str], shared: Path, how: int
) -> None:
    with lock_held_by_nobody(shared, how):
        export(environ, shared / "mine.json")
    assert sorted(p.name for p in shared.iterdir()) == ["mine.json"]  # no temporary file left


def test_the_cleaner_there_removes_only_this_users_own_leftovers(
    environ: dict[str, str], shared: Path, tmp_path: Path
) -> None:
    ours = shared / ".old.json.navi-export-aaaaaaaa.tmp"  # as a killed export of ours left it
    ours.write_text("the vault code is zorbquux")
    theirs = shared / ".their.json.navi-export-bbbbbbbb.tmp"
    theirs.write_text("another user's")
    give_to_nobody(theirs)
    precious = tmp_path / "precious"
    precious.write_text("kept")
    link = shared / ".link.json.navi-export-cccccccc.tmp"
    link.symlink_to(precious)

    with lock_held_by_nobody(shared, fcntl.LOCK_SH):
        export(environ, shared / "first.json")  # a writer may be at work: nothing removed
    assert ours.exists()

    said = export(environ, shared / "second.json")
    assert f"removed {ours}, left by a stopped export" in said
    assert not ours.exists()
    assert theirs.read_text() == "another user's"
    assert link.is_symlink() and precious.read_text() == "kept"
