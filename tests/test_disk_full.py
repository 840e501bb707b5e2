"""A full disk is not a damaged file: writes that do not fit are refused whole with "disk
full: N MB free in <folder>", reads go on, and writes resume by themselves once space is
back. A small tmpfs is the full disk (root may mount one; skipped otherwise); a unit test
forces SQLITE_FULL with ``PRAGMA max_page_count`` so that the suite covers it without one."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from navi_desktop.daemon.client import RpcCallError
from navi_desktop.errors import DiskFull
from navi_desktop.memory.store import MemoryStore
from tests.daemon_support import make_service
from tests.pipeline_helpers import extraction, fact, new_session
from tests.tui_support import DEAD_HOST, Daemon, make_home

BIG = "q" * 15_000


def assert_disk_full_words(message: str, folder: Path) -> None:
    assert message.startswith("disk full: ") and f"MB free in {folder}" in message
    for wrong in ("damaged", "move it aside", "move the file", "internal error"):
        assert wrong not in message


async def test_a_write_that_does_not_fit_is_refused_whole_and_later_ones_work(tmp_path):
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        kept = (await store.add_memory("likes tea")).memory.id
        pages = await store.db.scalar("PRAGMA page_count")
        await store.db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite: "disk is full"
        with pytest.raises(DiskFull) as err:
            for i in range(50):
                await store.add_memory(f"big {i} {BIG}")
        assert_disk_full_words(str(err.value), tmp_path)
        memories, total = await store.list_memories(status=None)
        assert kept in [m.id for m in memories]
        before = total
        data = {
            "format": "navi-memory",
            "version": 1,
            "memories": [{"id": i, "kind": "fact", "value": f"n{i} {BIG}"} for i in range(1, 20)],
        }
        with pytest.raises(DiskFull):
            await store.import_data(data)  # one transaction: none of it is kept
        assert (await store.list_memories(status=None))[1] == before
        await store.db.execute("PRAGMA max_page_count = 1073741823")  # space is back
        assert (await store.add_memory("likes rain")).action == "added"
    async with await MemoryStore.open(path) as store:
        assert (await store.list_memories(status=None))[1] == before + 1
        assert (await store.db.fetchone("PRAGMA integrity_check"))[0] == "ok"


# -- a real full disk --------------------------------------------------------------------------


@contextlib.contextmanager
def small_disk(mount: Path, size: str = "6m") -> Iterator[Path]:
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill ({done.stderr.strip() or 'not root'})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(mount: Path) -> Path:
    """Fill the disk to its last byte; delete the returned file to give the space back."""
    filler = mount / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 16, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


async def test_the_daemon_on_a_full_disk_refuses_writes_serves_reads_and_resumes(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        paths = make_home(disk, DEAD_HOST)
        folder = paths.profile_db("tester").parent
        daemon = await Daemon(paths).start()
        try:
            await daemon.call("memory.add", {"args": ["likes tea"]})
            filler = fill(disk)
            acknowledged = ["likes tea"]
            with pytest.raises(RpcCallError) as err:
                for i in range(40):  # the WAL may hold a few more before it must grow
                    await daemon.call("memory.add", {"args": [f"note {i} {BIG}"]})
                    acknowledged.append(f"note {i} {BIG}")
            assert err.value.kind == "DiskFull"
            assert_disk_full_words(str(err.value), folder)
            listed = await daemon.call("memory.list", {"kwargs": {"limit": 1000}})
            assert sorted(m["value"] for m in listed["memories"]) == sorted(acknowledged)
            assert (await daemon.call("daemon.status"))["profile_errors"] == {}
            filler.unlink()
            await daemon.call("memory.add", {"args": ["likes rain"]})  # by itself, same daemon
            assert (await daemon.call("memory.list"))["total"] == len(acknowledged) + 1
        finally:
            await daemon.stop()

        filler = fill(disk)  # a daemon starting on a full disk cannot open the file...
        daemon = await Daemon(paths).start()
        try:
            with pytest.raises(RpcCallError) as err:
                await daemon.call("memory.list")
            assert err.value.kind == "DiskFull" and "was not changed" in str(err.value)
            assert_disk_full_words(str(err.value), folder)
            filler.unlink()  # ...until space is back: no restart, no repair
            assert (await daemon.call("memory.list"))["total"] == len(acknowledged) + 1
        finally:
            await daemon.stop()


async def test_a_session_end_on_a_full_disk_stays_pending_with_that_reason(tmp_path, fake):
    with small_disk(tmp_path / "disk", "8m") as disk:
        events: list[tuple[str, dict]] = []

        async def broadcast(topic: str, method: str, params: dict) -> None:
            events.append((method, params))

        service = make_service(disk / "home", fake.url, broadcast)
        try:
            store = await service.store("me")
            said = "I live in Lyon and I like long walks. " * 20
            sid = await new_session(store, ("user", said), ("assistant", "Noted."))
            lyon = fact("home city", "Lyon", "I live in Lyon", category="profile")
            filler = fill(disk)
            fake.script(extraction([lyon], summary="Lives in Lyon. " + "z" * 3000))
            report = await service.end("me", sid, "explicit")
            assert report.status == "pending" and report.reason.startswith("disk full: ")
            assert_disk_full_words(report.reason, store.path.parent)
            assert [p["state"] for m, p in events if m == "session.state"] == ["pending"]
            assert not (await store.list_memories(kind="fact"))[0]  # nothing half-written
            filler.unlink()
            fake.script(extraction([lyon], summary="Lives in Lyon."))
            again = await service.end("me", sid, "retry")
            assert again.status == "processed"
            assert [m.value for m in (await store.list_memories(kind="fact"))[0]] == ["Lyon"]
        finally:
            await service.shutdown(budget_s=5)


def test_a_look_at_a_new_profile_on_a_full_disk_names_the_profile_not_a_scratch_folder(
    tmp_path, monkeypatch, capsys
):
    from navi_desktop.cli.main import run

    with small_disk(tmp_path / "disk") as disk:
        home = disk / "home"
        monkeypatch.setenv("NAVI_HOME", str(home))
        monkeypatch.setenv("NAVI_DAEMON", "off")
        assert run(["memory", "--profile", "typo", "list"]) == 0  # room: an empty answer
        filler = fill(disk)
        capsys.readouterr()
        for command in (["list"], ["search", "tea"], ["stats"]):
            assert run(["memory", "--profile", "typo", *command]) == 1
            err = capsys.readouterr().err.strip()
            assert err.startswith("navi: disk full: ") and err.count("\n") == 0, err
            assert f"MB free in {home / 'run'}; profile 'typo' has no memory yet" in err
            assert "empty-profile" not in err and err.endswith("free some space")
        filler.unlink()
        assert run(["memory", "--profile", "typo", "list"]) == 0
        assert not (home / "data" / "profiles" / "typo").exists()
        assert list((home / "run").iterdir()) == []  # no scratch folder left behind
