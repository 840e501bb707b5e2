"""``navi memory doctor`` (with ``--recover``), ``backup`` and ``restore``, and the daemon's
rolling daily backup: real files, the real CLI in-process, and a real daemon on a socket."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import subprocess
import time
from pathlib import Path

import pytest
import sqlean

from navi_desktop.memory.backup import DAILY, latest_backup, list_backups, take_daily
from navi_desktop.memory.store import MemoryStore
from navi_desktop.paths import Paths
from tests.daemon_home import navi as run_navi
from tests.test_profile_errors import half, make_profiles, state
from tests.tui_support import DEAD_HOST, Daemon, ThreadedDaemon, make_home

PROFILE = "alice"  # the conftest cli fixture's profile


def db(home: Path, profile: str = PROFILE) -> Path:
    return Paths.from_env({"NAVI_HOME": str(home)}).profile_db(profile)


def fill(home: Path, n: int = 60) -> None:
    asyncio.run(_fill(db(home), n))


async def _fill(path: Path, n: int) -> None:
    async with await MemoryStore.open(path) as store:
        sid = (await store.create_session("chat")).id
        for i in range(n):
            await store.add_memory(f"likes tea number {i} " + "x" * 300, category="preferences")
            await store.save_message(sid, "user", f"I said thing {i} " + "y" * 200)


def values(path: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)  # creates nothing
    try:
        return [r[0] for r in conn.execute("SELECT value FROM memories ORDER BY id")]
    finally:
        conn.close()


# -- doctor ------------------------------------------------------------------------------------


def test_doctor_on_a_healthy_profile_exits_0_and_says_so(cli, home):
    fill(home, 5)
    code, out, err = cli("doctor")
    assert code == 0, err
    for check in ("integrity", "full-text index", "schema", "vectors", "backups"):
        assert check in out
    assert "No problems found." in out
    report = json.loads(cli("--json", "doctor")[1])
    assert report["ok"] and not report["damaged"] and report["counts"]["memories"] == 5
    code, out, _ = cli("doctor", "--recover")  # nothing to recover: the command it gives
    assert code == 0 and f"`navi memory backup --profile {PROFILE}`" in out


def test_doctor_on_something_that_is_not_a_file_gives_no_chmod_advice(cli, home, tmp_path):
    # `--file /dev/null` advised `chmod 700 /dev` and `chmod 600 /dev/null`.
    pipe = tmp_path / "pipe.db"
    os.mkfifo(pipe)
    tmp_path.chmod(0o755)
    code, out, _ = cli("doctor", "--file", str(pipe))
    assert code == 1 and "it is not a regular file" in out
    assert "chmod" not in out and "permissions" not in out


def test_doctor_finds_a_damaged_full_text_index_and_never_writes(cli, home):
    fill(home, 30)
    path = db(home)
    with sqlite3.connect(path) as conn:  # damage one block of the index, as a bad disk would
        conn.execute(
            "UPDATE memories_fts_data SET block = zeroblob(length(block))"
            " WHERE id = (SELECT max(id) FROM memories_fts_data)"
        )
    conn.close()
    before = state(path.parent)
    code, out, _ = cli("doctor")
    assert code == 1
    assert "PROBLEM  full-text index" in out and "FTS5's integrity check failed" in out
    assert f"navi memory doctor --profile {PROFILE} --recover" in out
    assert state(path.parent) == before


def test_doctor_works_while_the_file_is_damaged_and_recover_writes_beside_it(cli, home):
    fill(home, 400)
    path = db(home)
    original = values(path)
    half(path)
    before = state(path.parent)
    code, out, _ = cli("doctor")
    assert code == 1 and "damaged: truncated" in out and "--recover" in out
    assert state(path.parent) == before

    code, out, err = cli("doctor", "--recover")
    assert code == 0, err
    new = [p for p in path.parent.iterdir() if p.name.startswith("memory.recovered-")]
    assert len(new) == 1 and stat.S_IMODE(new[0].stat().st_mode) == 0o600
    assert str(new[0]) in out and f"navi memory restore {new[0]}" in out
    assert {k: v for k, v in state(path.parent).items() if k != new[0].name} == before
    got = values(new[0])
    assert 0 < len(got) < len(original) and set(got) <= set(original)
    code, out, _ = cli("doctor", "--file", str(new[0]))
    assert code == 0 and "No problems found." in out


def test_recover_of_a_healthy_copy_keeps_every_row(cli, home):
    fill(home, 50)
    path = db(home)
    from navi_desktop.memory.salvage import recover

    # The page reader against a whole file: it must find every row SQLite finds.
    result = asyncio.run(recover(path))
    assert result.copied["memories"] == 50 and result.copied["messages"] == 50
    assert values(result.target) == values(path)
    conn = sqlean.connect(str(result.target))  # the stdlib's SQLite lacks this FTS5 option
    try:
        hits = conn.execute("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'tea'")
        assert hits.fetchone()[0] == 50  # the full-text index was built again from the rows
    finally:
        conn.close()


# -- backup and restore ------------------------------------------------------------------------


def test_backup_is_private_new_and_never_follows_a_link(cli, home, tmp_path):
    fill(home, 10)
    code, out, err = cli("backup")
    assert code == 0, err
    (made,) = list_backups(db(home))
    assert stat.S_IMODE(made.stat().st_mode) == 0o600
    assert stat.S_IMODE(made.parent.stat().st_mode) == 0o700
    assert values(made) == values(db(home)) and str(made) in out

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "planted.db"
    link.symlink_to(victim)
    code, _, err = cli("backup", "--to", str(link))
    assert code == 2 and "already exists" in err and len(err.strip().splitlines()) == 1
    assert victim.read_text() == "keep me" and link.is_symlink()
    code, _, err = cli("backup", "--to", str(made))
    assert code == 2 and "already exists" in err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_restore_checks_first_keeps_a_side_copy_and_never_half_restores(cli, home, tmp_path):
    fill(home, 10)
    assert cli("backup", "--to", str(tmp_path / "ten.db"))[0] == 0
    asyncio.run(_fill(db(home), 5))  # five more after the backup
    current = db(home).read_bytes()

    bad = tmp_path / "bad.db"
    bad.write_text("not a database")
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes((tmp_path / "ten.db").read_bytes()[:8192])
    pipe = tmp_path / "pipe.db"
    os.mkfifo(pipe)
    for wrong, why in (
        (bad, "it is not a SQLite database"),
        (truncated, "truncated"),
        (tmp_path / "missing.db", "no such file"),
        (pipe, "it is not a regular file"),
        (tmp_path, "it is a folder"),
    ):
        code, _, err = cli("restore", str(wrong), "--yes")
        assert code == 2 and f"{wrong} cannot be restored: {why}" in err
        assert len(err.strip().splitlines()) == 1
        assert db(home).read_bytes() == current
    assert not list(db(home).parent.glob("*.before-restore-*"))

    code, out, err = cli("restore", str(tmp_path / "ten.db"), "--yes")
    assert code == 0, err
    assert len(values(db(home))) == 10
    (side,) = db(home).parent.glob("memory.before-restore-*.db")
    assert side.read_bytes() == current and str(side) in out
    assert not [p for p in db(home).parent.iterdir() if p.name.endswith(".tmp")]


async def test_restore_through_the_running_daemon_reopens_the_profile(tmp_path):
    paths = make_home(tmp_path, DEAD_HOST)
    await make_profiles(paths, "bad")
    path = paths.profile_db("bad")
    backup = tmp_path / "copy.db"
    from navi_desktop.memory.backup import make_backup

    await asyncio.to_thread(make_backup, path, backup)
    half(path)
    daemon = await Daemon(paths).start()
    try:
        with pytest.raises(Exception, match="is damaged"):
            await daemon.call("memory.list", {"profile": "bad"})
        done = await daemon.call("profile.restore", {"profile": "bad", "file": str(backup)})
        assert done["memories"] == 41 and Path(done["side_copy"]).exists()
        assert (await daemon.call("memory.list", {"profile": "bad"}))["total"] == 41
        await daemon.call("memory.add", {"profile": "bad", "args": ["likes rain"]})
        assert (await daemon.call("memory.list", {"profile": "bad"}))["total"] == 42
    finally:
        await daemon.stop()


# -- rolling daily backups ---------------------------------------------------------------------


def test_daily_backups_roll_keeping_the_newest(home):
    fill(home, 3)
    path = db(home)
    day = 24 * 3600
    start = time.time() - 10 * day
    made = [take_daily(path, 3, now=start + i * day) for i in range(5)]
    assert all(m is not None for m in made)
    assert take_daily(path, 3, now=start + 4 * day + 3600) is None  # one a day
    kept = list_backups(path, DAILY)
    assert [p.name for p in kept] == [m.path.name for m in reversed(made)][:3]
    assert take_daily(path, 0, now=start + 20 * day) is None  # 0: turned off


def test_a_backup_stamped_in_the_future_does_not_stop_the_daily_ones(home):
    """Made while the clock was set a year ahead, then put right: before, no daily backup
    was due until that date, and the rotation would have kept it over every new one."""
    fill(home, 3)
    path = db(home)
    year = 365 * 24 * 3600
    ahead = take_daily(path, 2, now=time.time() + year)
    assert ahead is not None
    first = take_daily(path, 2)  # the clock is right again
    assert first is not None
    assert latest_backup(path) == first.path  # the advice for a damaged file names this one
    second = take_daily(path, 2, now=time.time() + 24 * 3600)
    assert second is not None
    assert {p.name for p in list_backups(path, DAILY)} == {first.path.name, second.path.name}


async def test_the_daemon_makes_a_daily_backup_after_a_write_but_not_for_reading(tmp_path):
    paths = make_home(tmp_path, DEAD_HOST, extra="backups = 2\n")
    await make_profiles(paths, "reader", "writer")
    daemon = await Daemon(paths).start()
    try:
        await daemon.call("memory.list", {"profile": "reader"})
        await daemon.call("memory.search", {"profile": "reader", "args": ["tea"]})
        await daemon.call("memory.add", {"profile": "writer", "args": ["likes rain"]})
        for _ in range(200):  # made in the background after the write
            if list_backups(paths.profile_db("writer")):
                break
            await asyncio.sleep(0.05)
    finally:
        await daemon.stop()
    (daily,) = list_backups(paths.profile_db("writer"))
    assert daily.name.startswith("daily-") and stat.S_IMODE(daily.stat().st_mode) == 0o600
    assert "likes rain" in values(daily)
    assert list_backups(paths.profile_db("reader")) == []


def test_doctor_suggests_the_latest_backup_when_the_file_is_damaged(cli, home):
    fill(home, 30)
    assert cli("backup")[0] == 0
    (made,) = list_backups(db(home))
    half(db(home))
    code, out, _ = cli("doctor")
    assert code == 1 and f"navi memory restore {made} --profile {PROFILE}" in out
    code, _, err = cli("list")
    assert code == 2 and f"navi memory restore {made}" in err


def test_the_whole_way_back_while_the_daemon_holds_the_profile_in_error(tmp_path):
    """doctor, --recover and restore as a user runs them, the daemon up all along."""
    paths = make_home(tmp_path, DEAD_HOST)
    asyncio.run(make_profiles(paths, "tester"))
    path = paths.profile_db("tester")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 9 // 10])  # the last tenth lost: most rows survive
    environ = {**os.environ, "NAVI_HOME": str(tmp_path / "home"), "NAVI_EMBEDDER": "none"}

    def navi(*args: str) -> subprocess.CompletedProcess[str]:
        return run_navi(environ, "memory", "--profile", "tester", *args, timeout=120)

    daemon = ThreadedDaemon(paths).start()
    try:
        with pytest.raises(Exception, match="is damaged"):
            daemon.call("memory.list")
        doctor = navi("doctor")
        assert doctor.returncode == 1 and "damaged: truncated" in doctor.stdout
        recovered = navi("doctor", "--recover")
        assert recovered.returncode == 0, recovered.stderr
        (new,) = path.parent.glob("memory.recovered-*.db")
        restored = navi("restore", str(new), "--yes")
        assert restored.returncode == 0, restored.stderr
        assert daemon.call("memory.list")["total"] == len(values(new)) > 0  # no restart
        assert daemon.call("daemon.status")["profile_errors"] == {}
    finally:
        daemon.stop()
