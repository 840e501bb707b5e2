"""A forget cut short after it was saved and before the profile's backups had it (the
daemon killed, a power cut): before, the backups kept the text with nothing to say so, and
a restore brought it back. Now the copies' share is saved with the forget (ids, never text)
and carried out by the next retry."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from navi_desktop.memory.backup import list_backups, make_backup
from navi_desktop.memory.store import MemoryStore
from navi_desktop.pipeline.forgetting import finish_scrubs
from tests.copies_support import cut_short, holds

SECRET = "zorbquux"


async def test_a_forget_cut_short_reaches_the_backups_at_the_next_retry(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        added = await store.add_memory(f"the vault code is {SECRET}")
        await store.add_memory("likes tea")
        session = await store.create_session()
        await store.save_message(session.id, "user", f"remember: the vault code is {SECRET}")
    await asyncio.to_thread(make_backup, path)
    (backup,) = list_backups(path)
    assert holds(backup, SECRET)

    cut_short(path, "forget", added.memory.id, "_scrub_copies")
    assert holds(backup, SECRET)  # the stop left it there

    async with await MemoryStore.open(path) as store:
        pending = await store.copy_scrubs_pending()
        assert [p["ids"] for p in pending] == [[added.memory.id]]
        assert SECRET not in repr(pending)  # ids and times, never the text
        await finish_scrubs(store)  # the daemon's minute tick
        assert await store.copy_scrubs_pending() == []
    assert not holds(backup, SECRET)
    async with await MemoryStore.open(backup, create=False) as copy:
        values = [m.value for m in (await copy.list_memories())[0]]
        assert values == ["likes tea"]
        said = [m.content for m in await copy.messages(session.id)]
        assert said == ["remember: [forgotten]"]


async def test_a_whole_forget_leaves_nothing_owed(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        added = await store.add_memory(f"the vault code is {SECRET}")
    await asyncio.to_thread(make_backup, path)
    async with await MemoryStore.open(path) as store:
        report = await store.forget(added.memory.id)
        assert report.backups == 1
        assert await store.copy_scrubs_pending() == []
        assert await store.retry_copy_scrubs() == []
    assert not holds(list_backups(path)[0], SECRET)


async def test_the_daemon_log_is_scrubbed_before_the_forget_is_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The logs cannot be scrubbed later from the note a forget saves (it holds ids, not the
    text), so the daemon scrubs them before the forget as well as after."""
    from navi_desktop.daemon.client import RpcCallError
    from navi_desktop.memory.forget_copies import CopyScrubOps
    from tests.tui_support import DEAD_HOST, Daemon, make_home

    paths = make_home(tmp_path, DEAD_HOST)
    daemon = await Daemon(paths).start()
    try:
        added = await daemon.call("memory.add", {"args": [f"the vault code is {SECRET}"]})
        paths.state.mkdir(parents=True, exist_ok=True)
        log = paths.state / "daemon.log"
        log.write_text(f"a model's failed answer quoted: the vault code is {SECRET}\n")

        async def stopped(*args: object, **kwargs: object) -> None:  # as if killed here
            raise RuntimeError("stopped between the forget and its copies")

        monkeypatch.setattr(CopyScrubOps, "_scrub_copies", stopped)
        with pytest.raises(RpcCallError):
            await daemon.call("memory.forget", {"args": [added["memory"]["id"]]})
        assert SECRET not in log.read_text()
    finally:
        await daemon.stop()


async def test_a_full_disk_when_the_copies_are_done_keeps_the_note_not_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forget is saved and its copies scrubbed; only crossing out its note does not fit.
    Before, that raised "disk full: this change was not saved" for a forget that was saved."""
    from navi_desktop.errors import DiskFull
    from navi_desktop.memory.forget_copies import COPIES_KEY

    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        added = await store.add_memory(f"the vault code is {SECRET}")
    await asyncio.to_thread(make_backup, path)
    async with await MemoryStore.open(path) as store:
        set_meta = type(store)._set_meta

        async def full(self: MemoryStore, key: str, value: object) -> None:
            if key == COPIES_KEY and value is None:  # crossing the note out
                raise DiskFull("disk full: 0.0 MB free")
            await set_meta(self, key, value)

        monkeypatch.setattr(type(store), "_set_meta", full)
        report = await store.forget(added.memory.id)
        assert report.backups == 1 and report.forgotten == [added.memory.id]
        monkeypatch.undo()
        assert [p["ids"] for p in await store.copy_scrubs_pending()] == [[added.memory.id]]
        await finish_scrubs(store)  # space is back: the retry finds nothing left to do
        assert await store.copy_scrubs_pending() == []
    assert not holds(list_backups(path)[0], SECRET)
