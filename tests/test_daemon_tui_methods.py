"""The RPC methods the TUI needs, through the real service, RPC server and client on a socket,
a real store file and the fake Ollama: what was used, regenerate, keep, and Ollama's models,
connection test and pulls."""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from navi_desktop.daemon.client import (
    DaemonClient,
    RemoteInvalidInput,
    RemoteNotFound,
    RpcCallError,
)
from navi_desktop.daemon.memory_api import RemoteMemory
from navi_desktop.daemon.rpc import RpcServer
from navi_desktop.daemon.service import Service
from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.memory.models import Signal
from navi_desktop.memory.store import MemoryStore
from tests.daemon_support import make_service
from tests.fake_ollama import FakeModel, FakeOllama, Reply
from tests.fakes import BagOfWordsEmbedder
from tests.pipeline_helpers import MODELS
from tests.tui_support import DEAD_HOST


class Daemon:
    def __init__(self, fake: FakeOllama, service: Service, client: DaemonClient) -> None:
        self.fake = fake
        self.service = service
        self.client = client

    async def call(self, method: str, **params):
        return await self.client.call(method, params, timeout=20)

    async def notes(self, wait: float = 0.3) -> list[tuple[str, dict]]:
        """The notifications that arrived (they come before the reply they belong to)."""
        out = []
        stream = self.client.notifications()
        while True:
            try:
                note = await asyncio.wait_for(stream.__anext__(), wait)
            except TimeoutError:
                return out
            out.append((note.method, note.params))


@pytest.fixture
async def daemon(tmp_path):
    # A short socket path: tmp_path can be longer than a Unix socket address allows.
    root = Path(tempfile.mkdtemp(prefix="navi-tui-", dir="/tmp"))
    async with FakeOllama(MODELS) as fake:
        server = RpcServer(root / "daemon.sock", {})
        service = make_service(tmp_path, fake.url, server.broadcast)
        for name, handler in service.handlers().items():
            server.register(name, handler)
        await server.start()
        client = await DaemonClient.connect(root / "daemon.sock")
        try:
            yield Daemon(fake, service, client)
        finally:
            await client.close()
            await service.shutdown(budget_s=5)
            await server.stop()
            shutil.rmtree(root, ignore_errors=True)


def deltas(notes: list[tuple[str, dict]], session_id: str) -> str:
    return "".join(
        p["text"] for m, p in notes if m == "chat.delta" and p["session_id"] == session_id
    )


def user_turns(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


# -- memory.used ------------------------------------------------------------------------------


async def test_memory_used_lists_what_went_into_the_turn(daemon):
    added = await daemon.call(
        "memory.add",
        args=["oolong tea"],
        kwargs={"key": "favourite tea", "category": "preferences"},
    )
    memory_id = added["memory"]["id"]
    daemon.fake.script(Reply("You like oolong tea."))
    sent = await daemon.call("chat.send", text="Which tea is my favourite tea?")

    used = await daemon.call("memory.used", args=[sent["user_message_id"]])
    assert sent["injected"] == len(used) >= 1
    first = used[0]
    assert set(first) == {"memory_id", "rank", "score", "signals", "reason", "memory"}
    assert first["memory_id"] == memory_id and first["reason"] == "relevant"
    assert first["memory"]["value"] == "oolong tea" and first["signals"]

    remote = RemoteMemory(daemon.client, "me")
    injections = await remote.injections_for(sent["user_message_id"])
    assert [i.memory_id for i in injections] == [u["memory_id"] for u in used]
    assert all(isinstance(s, Signal) for s in injections[0].signals.values())
    assert injections[0].memory.value == "oolong tea"
    # The reply's id, or an unknown one, had nothing injected.
    assert await daemon.call("memory.used", args=[sent["reply_message_id"]]) == []
    assert await daemon.call("memory.used", args=[999_999]) == []


# -- chat.regenerate --------------------------------------------------------------------------


async def test_regenerate_replaces_the_last_reply_and_streams_it(daemon):
    await daemon.call("memory.add", args=["green tea"], kwargs={"key": "tea"})
    daemon.fake.script(Reply("Hello there."), Reply("First answer about tea."))
    sid = (await daemon.call("chat.send", text="Hi"))["session_id"]
    first = await daemon.call("chat.send", text="What tea do I like?", session_id=sid)
    ledger = await daemon.call("memory.used", args=[first["user_message_id"]])
    assert ledger
    await daemon.notes()

    daemon.fake.script(Reply("Second answer: green tea."))
    again = await daemon.call("chat.regenerate", session_id=sid)
    assert again["reply"] == "Second answer: green tea." and not again["incognito"]
    assert again["session_id"] == sid and again["user_message_id"] == first["user_message_id"]
    assert deltas(await daemon.notes(), sid) == "Second answer: green tea."

    shown = await daemon.call("sessions.show", id=sid)
    assert shown["messages"][-1]["id"] == again["reply_message_id"]
    assert [(m["role"], m["content"]) for m in shown["messages"]] == [
        ("user", "Hi"),
        ("assistant", "Hello there."),
        ("user", "What tea do I like?"),
        ("assistant", "Second answer: green tea."),
    ]
    # The model saw the question once, after the earlier turn, without the dropped reply.
    body = daemon.fake.bodies()[-1]
    assert user_turns(body) == ["Hi", "What tea do I like?"]
    assert "First answer" not in str(body["messages"])
    # The ledger row set is the new turn's, not the old one's plus the new one's.
    used = await daemon.call("memory.used", args=[first["user_message_id"]])
    assert [(u["memory_id"], u["rank"], u["reason"]) for u in used] == [
        (u["memory_id"], u["rank"], u["reason"]) for u in ledger
    ]
    # The dropped reply is gone from the transcript search, the new one is found.
    hits = await daemon.call("memory.search", args=["answer"], kwargs={"kinds": ["message"]})
    assert [h["message"]["content"] for h in hits] == ["Second answer: green tea."]


async def test_regenerate_drops_tool_calls_and_results_too(daemon):
    daemon.fake.script(
        Reply(tool_calls=[("memory_list", {})]),
        Reply("You have nothing saved."),
    )
    sent = await daemon.call("chat.send", text="What do you know about me?")
    sid = sent["session_id"]
    roles = [m["role"] for m in (await daemon.call("sessions.show", id=sid))["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]

    daemon.fake.script(Reply("Nothing yet."))
    again = await daemon.call("chat.regenerate", session_id=sid)
    assert again["reply"] == "Nothing yet."
    shown = (await daemon.call("sessions.show", id=sid))["messages"]
    assert [(m["role"], m["content"]) for m in shown] == [
        ("user", "What do you know about me?"),
        ("assistant", "Nothing yet."),
    ]


async def test_regenerate_refuses_sessions_without_a_user_message(daemon):
    created = await daemon.call("sessions.create")
    with pytest.raises(RemoteInvalidInput, match="no message to answer again"):
        await daemon.call("chat.regenerate", session_id=created["id"])
    with pytest.raises(RemoteNotFound):
        await daemon.call("chat.regenerate", session_id="nosuchsession")
    empty = await daemon.call("sessions.create", incognito=True)
    with pytest.raises(RemoteInvalidInput, match="no message to answer again"):
        await daemon.call("chat.regenerate", session_id=empty["id"])
    with pytest.raises(RemoteInvalidInput, match="session_id"):
        await daemon.call("chat.regenerate")


async def test_regenerate_is_refused_while_the_session_is_answering(daemon):
    daemon.fake.script(Reply("Done."))
    sid = (await daemon.call("chat.send", text="Hello"))["session_id"]
    await daemon.notes()
    daemon.fake.script(Reply("slow " * 50, delay=0.05))
    answering = asyncio.ensure_future(daemon.call("chat.send", text="Tell me more", session_id=sid))
    stream = daemon.client.notifications()
    while (await asyncio.wait_for(stream.__anext__(), 5)).method != "chat.delta":
        pass  # answering now, with part of the reply streamed
    with pytest.raises(RemoteInvalidInput, match="already answering"):
        await daemon.call("chat.regenerate", session_id=sid)
    await daemon.call("chat.cancel", session_id=sid)
    result = await answering
    assert result["cancelled"]
    # The refused call dropped nothing: the cancelled turn's partial reply is still there.
    shown = (await daemon.call("sessions.show", id=sid))["messages"]
    assert [m["role"] for m in shown] == ["user", "assistant", "user", "assistant"]
    assert shown[-1]["content"].startswith("slow")


async def test_regenerate_in_incognito_replaces_the_last_turn_in_memory(daemon):
    daemon.fake.script(Reply("One."), Reply("Two."))
    sid = (await daemon.call("chat.send", text="first", incognito=True))["session_id"]
    await daemon.call("chat.send", text="second", session_id=sid)
    await daemon.notes()

    daemon.fake.script(Reply("Two, again."))
    again = await daemon.call("chat.regenerate", session_id=sid)
    assert again["reply"] == "Two, again." and again["incognito"]
    assert deltas(await daemon.notes(), sid) == "Two, again."
    body = daemon.fake.bodies()[-1]
    assert user_turns(body) == ["first", "second"] and "Two." not in str(body["messages"])
    assert daemon.service._incognito[sid].history == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "One."},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "Two, again."},
    ]
    assert not (Path(daemon.service.paths.profile_db("me"))).exists()  # still nothing on disk


async def test_a_failed_incognito_regenerate_keeps_the_old_turn(daemon):
    daemon.fake.script(Reply("Kept."))
    sid = (await daemon.call("chat.send", text="hello", incognito=True))["session_id"]
    daemon.fake.script(Reply(status=500, error="model crashed"))
    with pytest.raises(RpcCallError, match="model crashed"):
        await daemon.call("chat.regenerate", session_id=sid)
    assert daemon.service._incognito[sid].history[-1] == {"role": "assistant", "content": "Kept."}


# -- sessions.keep ----------------------------------------------------------------------------


async def test_keep_turns_an_incognito_session_into_a_stored_one(daemon):
    await daemon.client.subscribe("sessions")
    daemon.fake.script(Reply("Hi!"), Reply("Sure."))
    sid = (await daemon.call("chat.send", text="hello", incognito=True))["session_id"]
    await daemon.call("chat.send", text="remember this chat", session_id=sid)
    await daemon.notes()

    kept = await daemon.call("sessions.keep", id=sid, title="A good chat")
    assert kept["incognito"] is False and kept["messages"] == 4
    assert kept["title"] == "A good chat" and kept["id"] != sid
    shown = await daemon.call("sessions.show", id=kept["id"])
    assert [(m["role"], m["content"]) for m in shown["messages"]] == [
        ("user", "hello"),
        ("assistant", "Hi!"),
        ("user", "remember this chat"),
        ("assistant", "Sure."),
    ]
    notes = await daemon.notes()
    assert ("session.updated", {"profile": "me", "session_id": kept["id"]}) in notes
    assert sid not in daemon.service._incognito
    assert ("me", kept["id"]) in daemon.service._timers  # ended after inactivity like any other
    # It is a normal session now: the next message is stored in it.
    daemon.fake.script(Reply("Stored."))
    nxt = await daemon.call("chat.send", text="and now?", session_id=kept["id"])
    assert nxt["incognito"] is False and nxt["user_message_id"] is not None


async def test_keep_uses_a_default_title_and_refuses_unknown_ids(daemon):
    daemon.fake.script(Reply("Yes."))
    sid = (await daemon.call("chat.send", text="hi", incognito=True))["session_id"]
    kept = await daemon.call("sessions.keep", id=sid)
    assert kept["title"] == "Kept from incognito" and kept["messages"] == 2
    with pytest.raises(RemoteNotFound, match="no incognito session"):
        await daemon.call("sessions.keep", id=sid)  # kept once: no longer incognito
    with pytest.raises(RemoteNotFound):
        await daemon.call("sessions.keep", id="incognito-nope")
    stored = await daemon.call("sessions.create")
    with pytest.raises(RemoteNotFound):
        await daemon.call("sessions.keep", id=stored["id"])


# -- ollama.* ---------------------------------------------------------------------------------


async def test_models_lists_the_configured_and_a_given_host(daemon):
    listed = await daemon.call("ollama.models")
    assert listed["host"] == daemon.fake.url
    by_name = {m["name"]: m for m in listed["models"]}
    assert set(by_name) == {"llama3.2:latest", "gemma2:latest"}
    llama = by_name["llama3.2:latest"]
    assert llama["size"] == MODELS[0].size and llama["family"] == "llama"
    assert llama["parameter_size"] == "3.2B" and llama["quantization"] == "Q4_K_M"
    assert llama["capabilities"] == ["completion", "tools"]
    assert by_name["gemma2:latest"]["capabilities"] == ["completion"]

    async with FakeOllama([FakeModel("qwen3", ("completion", "thinking"))]) as other:
        there = await daemon.call("ollama.models", host=other.url)
    assert there["host"] == other.url
    assert [m["name"] for m in there["models"]] == ["qwen3:latest"]
    assert there["models"][0]["capabilities"] == ["completion", "thinking"]


async def test_models_on_a_dead_host_is_a_clear_error(daemon):
    with pytest.raises(RpcCallError, match=re.escape(f"cannot reach Ollama at {DEAD_HOST}")) as err:
        await daemon.call("ollama.models", host=DEAD_HOST)
    assert "ollama serve" in err.value.message and err.value.kind == "OllamaUnreachable"
    with pytest.raises(RemoteInvalidInput, match="host"):
        await daemon.call("ollama.models", host="  ")


async def test_connection_test_reports_without_raising(daemon):
    ok = await daemon.call("ollama.test")
    assert ok == {"host": daemon.fake.url, "reachable": True, "version": "0.12.3", "error": None}
    dead = await daemon.call("ollama.test", host=DEAD_HOST)
    assert dead["host"] == DEAD_HOST and dead["reachable"] is False and dead["version"] is None
    assert "cannot reach Ollama" in dead["error"]


async def test_status_answers_from_the_last_ollama_check(daemon):
    """The status line asks after every turn: one check serves until the monitor's next."""
    first = await daemon.call("daemon.status")
    second = await daemon.call("daemon.status")
    expected = {"host": daemon.fake.url, "reachable": True, "version": "0.12.3", "error": None}
    assert first["ollama"] == second["ollama"] == expected
    assert [r.path for r in daemon.fake.requests].count("/api/version") == 1
    # An explicit connection test always asks the server.
    assert await daemon.call("ollama.test") == expected
    assert [r.path for r in daemon.fake.requests].count("/api/version") == 2


async def test_pull_streams_progress_to_the_caller(daemon):
    pulled = await daemon.call("ollama.pull", model="mistral")
    assert pulled == {"model": "mistral", "status": "success"}
    steps = [p for m, p in await daemon.notes() if m == "ollama.pull.progress"]
    assert steps[0] == {
        "model": "mistral",
        "status": "pulling manifest",
        "completed": None,
        "total": None,
    }
    assert steps[-1]["status"] == "success"
    sizes = [(p["completed"], p["total"]) for p in steps if p["total"]]
    assert len(sizes) == 3 and sizes[-1][0] == sizes[-1][1]
    names = [m["name"] for m in (await daemon.call("ollama.models"))["models"]]
    assert "mistral:latest" in names


async def test_pull_of_a_missing_model_is_an_error_with_the_servers_words(daemon):
    daemon.fake.pull_missing.add("nosuchmodel")
    with pytest.raises(RpcCallError, match="file does not exist"):
        await daemon.call("ollama.pull", model="nosuchmodel")
    with pytest.raises(RemoteInvalidInput, match="model"):
        await daemon.call("ollama.pull")


# -- the store method behind regenerate ---------------------------------------------------------


async def test_drop_last_reply_removes_every_trace_of_the_reply(tmp_path):
    async with await MemoryStore.open(tmp_path / "m.db", embedder=BagOfWordsEmbedder()) as store:
        sid = (await store.create_session()).id
        await store.save_message(sid, "user", "Where is Kyoto?")
        await store.save_message(sid, "assistant", "Kyoto is in Japan.")
        user = await store.save_message(sid, "user", "Tell me about Zanzibar.")
        await store.save_message(sid, "assistant", "", meta={"tool_calls": []})
        await store.save_message(sid, "tool", "Zanzibar archipelago notes", name="memory_search")
        await store.save_message(sid, "assistant", "Zanzibar is an archipelago.")
        fact = (await store.add_memory("likes islands", key="islands")).memory
        from navi_desktop.memory.ledger import Injection

        await store.record_injections(sid, user.id, [Injection(fact.id, 1, 1.0, {}, "relevant")])
        await store.backfill_embeddings()
        hits = await store.search("archipelago", kinds=["message"])
        assert any(h.id > user.id for h in hits)
        last = (await store.messages(sid))[-1]
        await store.mark_processed(sid, last.id)  # the session ended after the old reply

        dropped_for = await store.drop_last_reply(sid)
        assert dropped_for.id == user.id and dropped_for.content == "Tell me about Zanzibar."
        assert [m.content for m in await store.messages(sid)] == [
            "Where is Kyoto?",
            "Kyoto is in Japan.",
            "Tell me about Zanzibar.",
        ]
        assert await store.injections_for(user.id) == []
        assert all(h.id <= user.id for h in await store.search("archipelago", kinds=["message"]))
        # The user's own message is still found; the dropped reply that also named it is not.
        found = await store.search("Zanzibar archipelago", kinds=["message"])
        assert found and all(h.id <= user.id for h in found)
        async with store.db.reading():
            fts = await store.db.scalar(
                "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'archipelago'"
            )
            vectors = await store.db.scalar(
                "SELECT count(*) FROM embeddings WHERE message_id > ?", (user.id,)
            )
            entities = await store.db.fetchall("SELECT norm FROM entities")
        assert fts == 0 and vectors == 0
        assert "zanzibar" in {r[0] for r in entities}  # still named by the user's message
        # The new reply is still to be learned from, even with the old reply's id back.
        again = await store.save_message(sid, "assistant", "Zanzibar lies off Tanzania.")
        assert again.id <= last.id  # at or below the old watermark
        assert [m.id for m in await store.unprocessed_messages(sid)] == [again.id]
        await store.drop_last_reply(sid)
        # Nothing after the user message now: a second drop leaves it as it is.
        assert (await store.drop_last_reply(sid)).id == user.id
        assert len(await store.messages(sid)) == 3

        empty = (await store.create_session()).id
        with pytest.raises(InvalidInput, match="no message to answer again"):
            await store.drop_last_reply(empty)
        with pytest.raises(NotFound):
            await store.drop_last_reply("nope")


async def test_a_rename_or_a_delete_is_announced_to_every_open_app(daemon):
    """The app's sessions list follows what the CLI or another window does."""
    daemon.fake.script(Reply("Hi!"))
    sid = (await daemon.call("chat.send", text="hello"))["session_id"]
    await daemon.client.subscribe("sessions")
    await daemon.notes()
    await daemon.call("sessions.rename", id=sid, title="Greetings")
    assert ("session.updated", {"profile": "me", "session_id": sid}) in await daemon.notes()
    await daemon.call("sessions.delete", id=sid)
    deleted = {"profile": "me", "session_id": sid, "deleted": True}  # an app with it open closes it
    assert ("session.updated", deleted) in await daemon.notes()
