"""One bad profile is that profile's error: a real daemon on a real socket keeps serving the
other profiles, every call on the bad one gets an error naming the file, what is wrong and
the fix, and the bad file is never written, renamed or repaired.

Damage is made to real files: truncated to half and to 10 bytes, replaced by text, a foreign
SQLite database, a newer schema, a folder at the file's path, and (as another OS user) a
file and a folder without permission.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from navi_desktop.daemon.client import RemoteCorruptDatabase
from navi_desktop.errors import ProfileTooNew
from navi_desktop.memory.store import MemoryStore
from navi_desktop.paths import Paths
from tests.daemon_home import navi as run_navi
from tests.nobody import run_as_nobody
from tests.tui_support import DEAD_HOST, Daemon, make_home
from tests.writer_support import killed

NOBODY = 65534


async def make_profiles(paths: Paths, *names: str) -> None:
    for name in names:
        async with await MemoryStore.open(paths.profile_db(name)) as store:
            await store.add_memory(f"{name} likes tea", category="preferences", key="drink")
            for i in range(40):  # a few pages, so that half of the file is not all of it
                await store.add_memory(f"{name} note {i} " + "x" * 400)


def half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def ten_bytes(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:10])


def text(path: Path) -> None:
    path.write_text("these are my shopping notes, not a database\n" * 20)


def foreign(path: Path) -> None:
    path.unlink()
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO photos (name) VALUES ('beach.jpg')")
    conn.close()


def newer_schema(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO schema_migrations (name, applied_at) VALUES ('0099_future', '2031')"
        )
    conn.close()


def folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def pipe_for_its_log(path: Path) -> None:
    os.mkfifo(path.with_name("memory.db-wal"))  # every write failed as a "disk I/O error"


def link_for_its_index(path: Path) -> None:
    path.with_name("memory.db-shm").symlink_to(path.parent.parent / "elsewhere")


def link_to_the_file(path: Path) -> None:
    """The file moved elsewhere and linked back: it was opened through the link, out of
    the profile folder's privacy (the README said such a link is refused)."""
    moved_to = path.parent.parent / "elsewhere.db"
    path.rename(moved_to)
    path.symlink_to(moved_to)


def pipe(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _give_away(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user")
    os.chown(path, 4321, -1)  # a user with no name here: nothing of this test is theirs


def another_users_folder(path: Path) -> None:
    """Before, Navi's `chmod` of it was refused with a PermissionError that ended the
    daemon's start: every profile was gone with it."""
    _give_away(path.parent)


def another_users_file(path: Path) -> None:
    _give_away(path)


def another_databases_log(path: Path) -> None:
    """The log a killed writer of another profile's file left, moved beside this one (see
    test_foreign_log.py): SQLite replayed it as this file's."""
    other = path.parents[2] / "elsewhere" / "memory.db"
    other.parent.mkdir()
    shutil.copy(path.parents[1] / "good" / "memory.db", other)
    killed(other, "saved by another profile's daemon")
    for suffix in ("-wal", "-shm"):
        shutil.copy(f"{other}{suffix}", f"{path}{suffix}")


def emptied_beside_its_backups(path: Path) -> None:
    """`: > memory.db` (see test_empty_profile_file.py): taken for a new profile."""
    from navi_desktop.memory.backup import make_backup

    make_backup(path)
    path.write_bytes(b"")


DAMAGES: list[tuple[Callable[[Path], None], str, str]] = [
    (half, "ProfileDamaged", "navi memory doctor --profile bad"),
    (ten_bytes, "ProfileDamaged", "truncated to 10 bytes"),
    (text, "ProfileDamaged", "it holds text"),
    (foreign, "ProfileForeign", "not a Navi memory file"),
    (newer_schema, "ProfileTooNew", "update Navi"),
    (folder, "ProfileUnreadable", "it is a folder"),
    (pipe, "ProfileUnreadable", "it is not a regular file; it was left untouched: move that"),
    (pipe_for_its_log, "ProfileUnreadable", "memory.db-wal beside it is a named pipe"),
    (link_for_its_index, "ProfileUnreadable", "memory.db-shm beside it is a symbolic link"),
    (link_to_the_file, "ProfileUnreadable", "it is a symbolic link (to "),
    (another_users_folder, "ProfileUnreadable", "profiles/bad belongs to uid 4321, not to you"),
    (another_users_file, "ProfileUnreadable", "the file belongs to uid 4321, not to you"),
    (another_databases_log, "ProfileUnreadable", "memory.db-wal beside it belongs to another"),
    (emptied_beside_its_backups, "ProfileDamaged", "empty (0 bytes), and its backups hold"),
]


def state(folder_path: Path) -> dict[str, Any]:
    """Every file in the profile's folder with its bytes and modification time (of a WAL's
    index, ``-shm``, only that it is there: it is SQLite's scratch, which any reader updates)."""
    out: dict[str, Any] = {}
    for p in sorted(folder_path.iterdir()):
        st = p.lstat()
        if p.name.endswith("-shm"):
            out[p.name] = "present"
        else:
            out[p.name] = (st.st_mtime_ns, p.read_bytes() if p.is_file() else "dir")
    return out


@pytest.mark.parametrize(("damage", "kind", "words"), DAMAGES, ids=[d[0].__name__ for d in DAMAGES])
async def test_a_bad_profile_is_its_own_error_and_the_daemon_serves_the_others(
    tmp_path: Path, damage: Callable[[Path], None], kind: str, words: str
) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    await make_profiles(paths, "good", "bad")
    bad = paths.profile_db("bad")
    damage(bad)
    before = state(bad.parent)

    daemon = await Daemon(paths).start()  # recovery at start opens every profile
    try:
        for _ in range(2):  # and again: the error state answers, the file is not reopened
            with pytest.raises(RemoteCorruptDatabase) as err:
                await daemon.call("memory.list", {"profile": "bad"})
            assert err.value.kind == kind
            message = str(err.value)
            assert "\n" not in message and str(bad) in message and words in message
            assert "left untouched" in message
            good = await daemon.call("memory.list", {"profile": "good"})
            assert good["total"] == 41
        added = await daemon.call("memory.add", {"profile": "good", "args": ["good likes jazz"]})
        assert added["action"] == "added"
        status = await daemon.call("daemon.status")
        assert status["profile_errors"]["bad"]["kind"] == kind
        assert "bad" not in status["profiles"] and "good" in status["profiles"]
        with pytest.raises(RemoteCorruptDatabase):
            await daemon.call("chat.send", {"profile": "bad", "text": "hello"})
    finally:
        await daemon.stop()
    assert state(bad.parent) == before  # not written, renamed, repaired, nor anything beside


async def test_a_fixed_file_is_opened_again_without_a_restart(tmp_path: Path) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    await make_profiles(paths, "bad")
    bad = paths.profile_db("bad")
    good_copy = bad.read_bytes()
    text(bad)
    daemon = await Daemon(paths).start()
    try:
        with pytest.raises(RemoteCorruptDatabase):
            await daemon.call("memory.list", {"profile": "bad"})
        bad.write_bytes(good_copy)  # the user put the right file back
        assert (await daemon.call("memory.list", {"profile": "bad"}))["total"] == 41
        assert (await daemon.call("daemon.status"))["profile_errors"] == {}
    finally:
        await daemon.stop()


async def test_a_newer_schema_is_refused_and_never_touched(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        await store.add_memory("likes tea")
    newer_schema(path)
    before = state(tmp_path)
    with pytest.raises(ProfileTooNew, match=r"newer version of Navi \(memory schema 99"):
        await MemoryStore.open(path)
    assert state(tmp_path) == before


# -- another OS user ---------------------------------------------------------------------------


def _run_as_nobody(work: Callable[[], Any]) -> Any:
    """``work()`` in a forked child whose uid is nobody's; its JSON result comes back."""
    # The child cannot read the interpreter's own folder: what it needs is imported here.
    import shlex  # noqa: F401

    import watchfiles.run  # noqa: F401

    import navi_desktop.config_watch
    import navi_desktop.daemon.service
    import navi_desktop.llm.backend
    import navi_desktop.pipeline.maintenance  # noqa: F401

    return run_as_nobody(work)


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_profile_its_user_cannot_read_is_named_with_the_fix(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run the daemon as another user (nobody)")
    root = Path(tempfile.mkdtemp(prefix="navi-perm-"))
    try:
        os.chmod(root, 0o755)
        paths = make_home(root, DEAD_HOST)
        asyncio.run(make_profiles(paths, "good", "bad"))
        for dirpath, _, files in os.walk(root):
            os.chown(dirpath, NOBODY, NOBODY)
            for name in files:
                os.chown(os.path.join(dirpath, name), NOBODY, NOBODY)
        bad = paths.profile_db("bad")
        locked = bad if what == "file" else bad.parent
        os.chmod(locked, 0)

        def scenario() -> dict[str, Any]:
            async def run() -> dict[str, Any]:
                daemon = await Daemon(paths).start()
                out: dict[str, Any] = {}
                try:
                    try:
                        await daemon.call("memory.list", {"profile": "bad"})
                    except RemoteCorruptDatabase as exc:
                        out["bad"] = [exc.kind, str(exc)]
                    out["good"] = (await daemon.call("memory.list", {"profile": "good"}))["total"]
                finally:
                    await daemon.stop()
                return out

            return asyncio.run(run())

        out = _run_as_nobody(scenario)
        kind, message = out["bad"]
        assert kind == "ProfileUnreadable" and "permission denied" in message
        assert str(bad) in message and "chmod u+rw" in message and "\n" not in message
        assert out["good"] == 41
        os.chmod(locked, 0o700 if what == "folder" else 0o600)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- navi chat ---------------------------------------------------------------------------------


def test_navi_chat_on_a_damaged_profile_prints_one_line(tmp_path: Path) -> None:
    home = tmp_path / "h"
    paths = Paths.from_env({"NAVI_HOME": str(home)})
    asyncio.run(make_profiles(paths, "bad"))
    half(paths.profile_db("bad"))
    environ = {**os.environ, "NAVI_HOME": str(home), "OLLAMA_HOST": DEAD_HOST}

    def navi(*args: str) -> subprocess.CompletedProcess[str]:
        return run_navi(environ, *args)

    try:
        chat = navi("chat", "--profile", "bad", "hello")
        assert chat.returncode == 2, chat.stderr
        lines = chat.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in chat.stderr, chat.stderr
        assert lines[0].startswith("navi: ") and "is damaged" in lines[0]
        assert "navi memory doctor --profile bad" in lines[0]
        listing = navi("memory", "--profile", "bad", "list")
        assert listing.returncode == 2 and len(listing.stderr.strip().splitlines()) == 1
    finally:
        navi("daemon", "stop")


async def test_a_file_where_a_folder_of_profiles_goes_is_named(tmp_path: Path) -> None:
    from navi_desktop.errors import ProfileUnreadable

    (tmp_path / "profiles").write_text("a file someone left here\n")
    path = tmp_path / "profiles" / "me" / "memory.db"
    with pytest.raises(ProfileUnreadable) as err:
        await MemoryStore.open(path)
    assert str(err.value) == (
        f"cannot use {path}: {tmp_path / 'profiles'} is not a folder; it was left untouched:"
        " move that away, then try again"
    )
    assert (tmp_path / "profiles").read_text() == "a file someone left here\n"


def test_a_read_only_file_system_met_mid_write_is_said_as_it_is_everywhere(tmp_path):
    """The file checks and a failed write (os_failure) give the same line: the disk, not the
    profile, with the next call writing again by itself."""
    import errno

    from navi_desktop.errors import DiskError
    from navi_desktop.memory.failures import os_failure, read_only_fs

    path = tmp_path / "memory.db"
    met = os_failure(OSError(errno.EROFS, "Read-only file system", str(path)), path)
    assert isinstance(met, DiskError) and str(met) == str(read_only_fs(path))
    assert "Navi writes again by itself" in str(met)
