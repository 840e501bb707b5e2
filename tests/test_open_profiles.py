"""How many profiles the daemon keeps open (daemon/open_profiles.py): a client naming a new
profile in every call grew the daemon by a thread and its caches each time, without end."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from navi_desktop.config import load_settings
from navi_desktop.daemon import open_profiles
from navi_desktop.daemon.service import Service
from navi_desktop.errors import InvalidInput, NaviError
from tests.daemon_support import Peer
from tests.fake_ollama import FakeOllama
from tests.pipeline_helpers import MODELS
from tests.tui_support import make_home


async def nothing(*_: object) -> None:
    return None


def service_at(tmp_path: Path, host: str = "http://127.0.0.1:9") -> Service:
    paths = make_home(tmp_path, host)
    settings, errors = load_settings(paths.config_file)
    assert errors == []
    return Service(paths, settings, nothing)


async def test_at_the_cap_the_least_recently_used_idle_profile_makes_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(open_profiles, "MAX_OPEN", 4)
    monkeypatch.setattr(open_profiles, "ROOM_IDLE_S", 0.2)
    service = service_at(tmp_path)
    try:
        for name in ("tester", "p1", "p2", "p3"):  # tester: the configured one
            store = await service.store(name)
            await store.add_memory(f"{name} likes tea")
        with pytest.raises(InvalidInput) as refused:  # all used within the last 0.2 s
            await service.store("p4")
        assert "too many memory profiles in use at once (4)" in str(refused.value)
        assert "\n" not in str(refused.value)

        await asyncio.sleep(0.25)
        await service.store("p2")  # used again: p1 is now the least recently used
        await service.store("p4")
        assert service.profiles == ["p2", "p3", "p4", "tester"]
        await asyncio.sleep(0.25)
        memories, _ = await (await service.store("p1")).list_memories()  # opened again
        assert [m.value for m in memories] == ["p1 likes tea"]
        assert "tester" in service.profiles and len(service.profiles) == 4
    finally:
        await service.shutdown(budget_s=5)


async def test_idle_profiles_close_but_not_the_configured_one_nor_one_in_a_session(
    tmp_path: Path,
) -> None:
    async with FakeOllama(MODELS) as fake:
        service = service_at(tmp_path, fake.url)
        try:
            held = await service.store("p1")
            await service.store("tester")
            await service.chat_send({"text": "hello", "profile": "p2"}, Peer())  # open session
            assert await open_profiles.close_idle(service, idle_s=0.0) == 1
            assert service.profiles == ["p2", "tester"]
            with pytest.raises(NaviError, match="was closed while in use; try again"):
                await held.list_memories()  # a caller still holding the closed one
            await (await service.store("p1")).list_memories()
        finally:
            await service.shutdown(budget_s=5)


async def test_a_storm_of_new_profiles_stops_at_the_cap_but_never_locks_the_user_out(
    tmp_path: Path,
) -> None:
    service = service_at(tmp_path)
    try:
        for i in range(open_profiles.MAX_OPEN):
            await service.store(f"p{i}")
        with pytest.raises(InvalidInput):
            await service.store("one-too-many")
        await service.store("tester")  # the configured profile: never locked out
        assert len(service.profiles) == open_profiles.MAX_OPEN + 1
    finally:
        await service.shutdown(budget_s=5)


async def test_the_status_while_profiles_open_is_not_an_internal_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = service_at(tmp_path)
    try:
        first = await service.store("tester")
        asked, go_on = asyncio.Event(), asyncio.Event()
        answer = first.pending_status

        async def slow(*args: object) -> tuple[int, str | None]:  # in the loop over profiles
            asked.set()
            await go_on.wait()
            return await answer(*args)

        monkeypatch.setattr(first, "pending_status", slow)
        status = asyncio.ensure_future(service.status({}, Peer()))
        await asyncio.wait_for(asked.wait(), 10)
        for i in range(3):  # opened meanwhile (a client, the start's recovery)
            await service.store(f"q{i}")
        go_on.set()
        assert "tester" in (await status)["profiles"]
    finally:
        await service.shutdown(budget_s=5)


async def test_the_start_keeps_open_only_what_it_has_to_recover(tmp_path: Path) -> None:
    from navi_desktop.memory.store import MemoryStore

    service = service_at(tmp_path)
    for name in ("p1", "p2", "p3"):
        async with await MemoryStore.open(service.paths.profile_db(name)) as store:
            await store.add_memory(f"{name} likes tea")
            if name == "p2":  # a session a crash left open
                session = await store.create_session()
                await store.save_message(session.id, "user", "hello")
    try:
        await service.recover()
        assert service.profiles == ["p2"]
    finally:
        await service.shutdown(budget_s=5)


async def test_a_second_name_for_an_open_profiles_file_is_refused(tmp_path: Path) -> None:
    """On a file system that ignores case, "Work" is the folder of "work"; a linked folder
    is the same on any. Two stores on one file would each keep their own sessions and
    search index of it."""
    service = service_at(tmp_path)
    try:
        work = await service.store("work")
        await work.add_memory("likes tea")
        folder = service.paths.profile_db("work").parent
        folder.with_name("Work").symlink_to(folder, target_is_directory=True)
        with pytest.raises(InvalidInput) as refused:
            await service.store("Work")
        assert "is the open profile 'work' under another name" in str(refused.value)
        assert "use 'work'" in str(refused.value) and "\n" not in str(refused.value)
        assert service.profiles == ["work"]
    finally:
        await service.shutdown(budget_s=5)


async def test_a_profile_used_while_its_idleness_is_checked_stays_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checks read the file (sessions to end, scrubs to finish); a request that comes
    meanwhile must not find its store closed under it ("closed while in use")."""
    service = service_at(tmp_path)
    try:
        held = await service.store("p1")
        ask = type(held).sessions_to_process

        async def slow(self, *args, **kwargs):  # a request arrives during the check
            await service.store("p1")
            return await ask(self, *args, **kwargs)

        monkeypatch.setattr(type(held), "sessions_to_process", slow)
        assert await open_profiles.close_idle(service, idle_s=0.0) == 0
        assert "p1" in service.profiles
        await held.list_memories()  # still open
    finally:
        monkeypatch.undo()
        await service.shutdown(budget_s=5)
