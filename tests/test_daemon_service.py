"""The daemon's service in-process: the inactivity timer ends a session through the seam,
settings are applied, and Ollama's state changes reach subscribers."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from navi_desktop.daemon.main import _watch_ollama
from navi_desktop.daemon.service import Service
from navi_desktop.llm.types import Health
from tests.daemon_support import Peer, make_service
from tests.fake_ollama import FakeOllama, Reply
from tests.pipeline_helpers import MODELS, extraction, fact, profile


class QuickService(Service):
    def idle_seconds(self) -> float:
        return 0.3


@pytest.fixture
async def setup(tmp_path):
    async with FakeOllama(MODELS) as fake:
        sent: list[tuple[str, str, dict]] = []

        async def broadcast(topic, method, params):
            sent.append((topic, method, params))

        service = make_service(tmp_path, fake.url, broadcast, QuickService)
        try:
            yield fake, service, sent
        finally:
            await service.shutdown(budget_s=5)


async def test_inactivity_ends_the_session_and_writes_memories(setup):
    fake, service, sent = setup
    said = "I work as a marine biologist."
    fake.script(
        Reply("How interesting!"),
        extraction(
            [fact("job", "marine biologist", "I work as a marine biologist", category="profile")],
            summary="The user talked about their job.",
        ),
        profile("The user is a marine biologist."),
    )
    peer = Peer()
    result = await service.chat_send({"text": said}, peer)
    assert result["reply"] == "How interesting!"
    assert "".join(p["text"] for m, p in peer.notes if m == "chat.delta") == "How interesting!"
    store = await service.store("me")
    assert (await store.get_session(result["session_id"])).state == "open"

    # The 0.3 s timer, then extraction through the fake. The state notice is the end's last
    # step (after the store is marked ended and the vectors are written), so wait for it.
    for _ in range(100):
        await asyncio.sleep(0.05)
        if ("sessions", "session.state") in {(t, m) for t, m, _ in sent}:
            break
    assert ("sessions", "session.state") in {(t, m) for t, m, _ in sent}
    assert (await store.get_session(result["session_id"])).state == "ended"
    facts, _ = await store.list_memories(kind="fact")
    assert [m.value for m in facts] == ["marine biologist"]
    assert any(m == "memory.changed" for _, m, _ in sent)


async def test_a_new_message_restarts_the_timer(setup):
    _, service, _ = setup
    peer = Peer()
    first = await service.chat_send({"text": "one"}, peer)
    await asyncio.sleep(0.2)
    await service.chat_send({"text": "two", "session_id": first["session_id"]}, peer)
    await asyncio.sleep(0.2)  # 0.4 s since the first message, 0.2 s since the last
    store = await service.store("me")
    assert (await store.get_session(first["session_id"])).state == "open"


async def test_ollama_state_changes_are_broadcast_once_each():
    states = [Health(True, "h", "1"), Health(True, "h", "1"), Health(False, "h", error="down")]

    class Stub:
        async def ollama_health(self):
            return states.pop(0) if len(states) > 1 else states[0]

    sent = []

    async def broadcast(topic, method, params):
        sent.append((topic, method, params["reachable"]))

    task = asyncio.ensure_future(_watch_ollama(Stub(), broadcast, every_s=0.01))
    await asyncio.sleep(0.1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert sent == [("ollama", "ollama.state", True), ("ollama", "ollama.state", False)]


async def test_pending_sessions_are_retried_when_due(setup, monkeypatch):
    fake, service, _ = setup
    peer = Peer()
    fake.script(Reply("ok"), Reply("this is not json"))
    sid = (await service.chat_send({"text": "I live in Oslo"}, peer))["session_id"]
    report = await service.end("me", sid, "explicit")
    assert report.status == "pending"
    assert await service.retry_due() == 0  # not due yet: backoff

    import navi_desktop.memory.sessions as sessions

    monkeypatch.setattr(sessions, "now_iso", lambda: "2999-01-01T00:00:00.000Z")
    fake.script(
        extraction([fact("city", "Oslo", "I live in Oslo", category="profile")]),
        profile("Lives in Oslo."),
    )
    assert await service.retry_due() == 1
    store = await service.store("me")
    for _ in range(100):
        await asyncio.sleep(0.02)
        if (await store.get_session(sid)).state == "ended":
            break
    assert (await store.get_session(sid)).state == "ended"
    assert [m.value for m in (await store.list_memories(kind="fact"))[0]] == ["Oslo"]


async def test_concurrent_first_uses_open_the_profile_once(setup):
    _, service, _ = setup
    stores = await asyncio.gather(*(service.store("me") for _ in range(5)))
    assert all(s is stores[0] for s in stores)


async def test_a_new_ollama_host_applies_at_once_and_the_old_client_is_closed(setup):
    fake, service, _ = setup
    fake.script(Reply("From the first server."))
    first = await service.chat_send({"text": "hello"}, Peer())
    old_backend = service.backend()
    async with FakeOllama(MODELS, default_reply=Reply("From the second server.")) as second:
        moved = replace(service.settings, ollama=replace(service.settings.ollama, host=second.url))
        service.apply_settings(moved)
        status = await service.status({}, Peer())
        assert status["ollama"]["host"] == second.url
        again = await service.chat_send(
            {"text": "again", "session_id": first["session_id"]}, Peer()
        )
        assert again["reply"] == "From the second server."
        assert second.bodies()  # the turn reached the new host
        for _ in range(40):  # the old client closes once nothing uses it
            if old_backend._http.is_closed:
                break
            await asyncio.sleep(0.05)
        assert old_backend._http.is_closed


async def test_a_store_that_fails_to_close_leaves_the_others_closing(tmp_path, caplog):
    """A close that raises (a full disk at the last checkpoint) is one line in the log, and
    every other profile's file is still closed."""
    async with FakeOllama(MODELS) as fake:

        async def broadcast(topic, method, params):
            pass

        service = make_service(tmp_path, fake.url, broadcast, Service)
        first, second = await service.store("one"), await service.store("two")

        async def failing() -> None:
            await first.db.close()
            raise OSError(28, "No space left on device")

        first.close = failing  # type: ignore[method-assign]
        await service.shutdown(budget_s=5)
    with pytest.raises(ValueError, match="no active connection"):
        await second.db.conn.execute("SELECT 1")  # closed
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == ["profile one not closed cleanly: [Errno 28] No space left on device"]
