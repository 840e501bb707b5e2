"""A deleted session is gone as a forgotten memory is: from the file's free space and its
log, from the profile's backups and from a file a restore kept aside, so no restore brings
it back. Before, `navi sessions delete` removed the rows only: the text stayed in every
backup (a restore brought the session back) and in the write-ahead log while the daemon ran."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from navi_desktop.memory.backup import list_backups, make_backup
from navi_desktop.memory.store import MemoryStore
from navi_desktop.pipeline.forgetting import finish_scrubs
from tests.copies_support import cut_short, holds
from tests.tui_support import DEAD_HOST, Daemon, make_home

SECRET = "pangolin3141"


async def a_profile_with_a_secret_session(path: Path) -> str:
    async with await MemoryStore.open(path) as store:
        await store.add_memory("likes tea")
        kept = await store.create_session()
        await store.save_message(kept.id, "user", "what tea goes with rain?")
        secret = await store.create_session()
        await store.save_message(secret.id, "user", f"my door code is {SECRET}")
        await store.save_message(secret.id, "assistant", f"Noted: {SECRET}.")
        return secret.id


async def test_a_deleted_session_leaves_the_file_its_backups_and_a_kept_aside_copy(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory.db"
    secret = await a_profile_with_a_secret_session(path)
    await asyncio.to_thread(make_backup, path)
    (backup,) = list_backups(path)
    aside = path.with_name("memory.before-restore-20260101T000000Z.db")
    aside.write_bytes(backup.read_bytes())
    assert holds(backup, SECRET) and holds(aside, SECRET)

    async with await MemoryStore.open(path) as store:
        assert await store.delete_session(secret) == 2
        assert not holds(path, SECRET)  # the daemon keeps the file open: its log too
        assert await store.copy_scrubs_pending() == []
        assert await store.pending_scrubs() == []
    for copy_path in (backup, aside):
        assert not holds(copy_path, SECRET), copy_path
        async with await MemoryStore.open(copy_path, create=False) as copy:
            sessions = [s.id for s in await copy.list_sessions()]
            assert secret not in sessions and len(sessions) == 1  # the other one stays
            assert [m.value for m in (await copy.list_memories())[0]] == ["likes tea"]


async def test_a_delete_cut_short_reaches_the_backups_at_the_next_retry(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    secret = await a_profile_with_a_secret_session(path)
    await asyncio.to_thread(make_backup, path)
    (backup,) = list_backups(path)
    cut_short(path, "delete_session", secret, "_delete_in_copies")
    assert holds(backup, SECRET)  # the stop left it there
    async with await MemoryStore.open(path) as store:
        pending = await store.copy_scrubs_pending()
        assert [p.get("session") for p in pending] == [secret]
        await finish_scrubs(store)  # the daemon's minute tick
        assert await store.copy_scrubs_pending() == []
    assert not holds(backup, SECRET)
    assert not holds(path, SECRET)


async def test_navi_sessions_delete_through_the_daemon_leaves_no_copy(
    tmp_path: Path, caplog
) -> None:
    paths = make_home(tmp_path, DEAD_HOST)
    db = paths.profile_db("tester")
    db.parent.mkdir(parents=True, mode=0o700)
    secret = await a_profile_with_a_secret_session(db)
    daemon = await Daemon(paths).start()
    try:
        await asyncio.to_thread(make_backup, db)  # what `navi memory backup` does
        # The daemon may take its daily backup at start too: every copy must lose the session.
        backups = list_backups(db)
        assert backups and all(holds(backup, SECRET) for backup in backups)
        await daemon.call("sessions.delete", {"id": secret})
        assert not holds(db, SECRET)  # while the daemon runs, its log included
        assert not any(holds(backup, SECRET) for backup in list_backups(db))
        listed = await daemon.call("sessions.list")
        assert secret not in str(listed)
    finally:
        await daemon.stop()
    gc.collect()  # a failed task nobody awaited is reported when it is collected
    # The daemon was retrying the end of the session it deleted: one line, no traceback.
    assert not [r for r in caplog.records if r.exc_info or "never retrieved" in r.getMessage()]


async def test_a_forget_beside_a_deletes_unfinished_copies_works_and_both_finish(
    tmp_path: Path,
) -> None:
    """The copies' notes of a forget and of a session delete share one list: a forget that
    read every note as a forget's (by its ids) failed while a delete's note waited."""
    path = tmp_path / "memory.db"
    secret = await a_profile_with_a_secret_session(path)
    await asyncio.to_thread(make_backup, path)
    (backup,) = list_backups(path)
    cut_short(path, "delete_session", secret, "_delete_in_copies")
    async with await MemoryStore.open(path) as store:
        tea = (await store.list_memories())[0][0]
        report = await store.forget(tea.id)
        assert report.forgotten == [tea.id] and report.backups == 1
        assert [p.get("session") for p in await store.copy_scrubs_pending()] == [secret]
        await finish_scrubs(store)
        assert await store.copy_scrubs_pending() == []
    assert not holds(backup, SECRET) and not holds(backup, "likes tea")


async def test_a_delete_waits_for_the_daily_backup_the_maintenance_pass_is_making(
    tmp_path: Path, monkeypatch
) -> None:
    """The maintenance pass made its daily backup apart from the one a commit starts, so a
    delete meanwhile listed the copies before that backup was in place, and the backup
    (a copy from before the delete) kept the session."""
    import time

    import navi_desktop.memory.backup as backup

    real_copy = backup.copy_database

    def slow_copy(*args, **kwargs):  # a large file: the copy is done, its rename comes later
        written = real_copy(*args, **kwargs)
        time.sleep(0.5)
        return written

    monkeypatch.setattr(backup, "copy_database", slow_copy)
    path = tmp_path / "memory.db"
    secret = await a_profile_with_a_secret_session(path)
    async with await MemoryStore.open(path) as store:
        store.db.backups = lambda: 3
        await store.add_memory("likes rain")  # a write: a backup is due
        made = asyncio.create_task(store.backup_if_due())  # what the maintenance pass does
        await asyncio.sleep(0.2)  # the copy is made, not yet in place
        await store.delete_session(secret)
        assert (await made) is not None
    (daily,) = list_backups(path)
    assert not holds(daily, SECRET)
