"""memory_correct and memory_stats, and the rule that forgetting and correcting are the user's
decisions: through a real daemon on its socket, the model's tool calls scripted in the fake
Ollama, the results read back from the session and the memory file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from navi_desktop.pipeline.context import quote
from navi_desktop.pipeline.user_intent import asks_to_correct, asks_to_forget
from tests.fake_ollama import FakeOllama, Reply
from tests.tui_support import Daemon as RunningDaemon


@dataclass
class Daemon:
    """The real daemon (conftest's ``daemon``) and the fake Ollama it talks to."""

    running: RunningDaemon
    fake: FakeOllama

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        return await self.running.call(method, params)


@pytest.fixture
def navi(daemon: RunningDaemon, fake: FakeOllama) -> Daemon:
    return Daemon(daemon, fake)


async def _add(daemon: Daemon, value: str, **fields: Any) -> dict[str, Any]:
    added = await daemon.call("memory.add", {"args": [value], "kwargs": fields})
    return added["memory"]


async def _turn(
    daemon: Daemon, text: str, *calls: tuple[str, dict[str, Any]], sid: str | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """The user says ``text``; the model makes ``calls`` (one round), then answers. Returns
    the session id and the tool messages stored in the session, with their parsed results.
    Only the chat turn gets the scripted calls: background work the daemon starts (a profile
    summary after a forget) keeps the fake's usual answer."""
    usual = daemon.fake.default_reply

    def answer(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if body.get("tools") and last == {"role": "user", "content": text}:
            return Reply(tool_calls=list(calls))
        if body.get("tools") and last["role"] == "tool":
            return Reply("Done.")
        return usual(body) if callable(usual) else usual

    daemon.fake.default_reply = answer
    try:
        reply = await daemon.call("chat.send", {"text": text, "session_id": sid})
    finally:
        daemon.fake.default_reply = usual
    assert reply["reply"] == "Done."
    shown = await daemon.call("sessions.show", {"id": reply["session_id"]})
    last_user = max(i for i, m in enumerate(shown["messages"]) if m["role"] == "user")
    tools = [m for m in shown["messages"][last_user:] if m["role"] == "tool"]
    assert [m["name"] for m in tools] == [name for name, _ in calls]
    for message in tools:
        message["result"] = json.loads(message["content"])
    return reply["session_id"], tools


def _system_prompt(daemon: Daemon, text: str) -> str:
    """The system prompt of the chat request that answered the user's ``text``."""
    [body] = [
        r.body
        for r in daemon.fake.requests
        if r.path == "/api/chat" and r.body["messages"][-1] == {"role": "user", "content": text}
    ]
    return body["messages"][0]["content"]


# -- memory_correct ---------------------------------------------------------------------------


async def test_the_user_says_they_moved_and_the_fact_is_superseded(navi: Daemon) -> None:
    old = await _add(
        navi, "Lisbon", key="home city", category="profile", evidence="I live in Lisbon"
    )
    said = "Big news: I moved to Porto last month. Can you recommend a cafe?"
    sid, [tool] = await _turn(navi, said, ("memory_correct", {"id": old["id"], "value": "Porto"}))
    result = tool["result"]
    assert result["corrected"] is True and result["replaced"] == old["id"]
    assert result["text"] == "user home city: Porto"
    assert tool["meta"] is None  # nothing refused

    new = await navi.call("memory.get", {"args": [result["id"]]})
    assert (new["value"], new["key"], new["category"]) == ("Porto", "home city", "profile")
    assert new["evidence"] == "Big news: I moved to Porto last month."  # the user's sentence
    assert new["source"] == "user_explicit"
    before = await navi.call("memory.get", {"args": [old["id"]]})
    assert (before["status"], before["superseded_by"]) == ("superseded", new["id"])
    assert before["valid_to"] is not None  # kept as history, not overwritten
    versions = await navi.call("memory.versions", {"args": [new["id"]]})
    assert [v["value"] for v in versions] == ["Lisbon"]
    history = await navi.call("memory.history", {"args": [new["id"]]})
    assert [(h["action"], h["actor"]) for h in history] == [
        ("create", "assistant"),
        ("supersedes", "assistant"),
    ]

    # The next turn's memory block holds the new value, as a triple with the user's words.
    asked = "Any cafe tips near my home in Porto?"
    await navi.call("chat.send", {"text": asked, "session_id": sid})
    system = _system_prompt(navi, asked)
    line = f"user HOME_CITY {quote('Porto')} \u2014 {quote(new['evidence'])}"
    assert line in system
    assert "Lisbon" not in system


async def test_a_correction_the_user_did_not_ask_for_is_refused_and_logged(
    navi: Daemon,
) -> None:
    old = await _add(navi, "Lisbon", key="home city", category="profile")
    sid, [tool] = await _turn(
        navi,
        "What is the weather like in Porto this week?",
        ("memory_correct", {"id": old["id"], "value": "Porto"}),
    )
    assert list(tool["result"]) == ["error"]
    assert tool["result"]["error"].startswith("refused: the user's last message neither asks")
    assert "ask them" in tool["result"]["error"]  # what the model should do instead
    # Logged on the tool's message in the session, next to the call that asked for it.
    assert tool["meta"] == {
        "refused": "the user's last message neither asks for a change nor says 'Porto'"
    }
    shown = await navi.call("sessions.show", {"id": sid})
    [call] = [m for m in shown["messages"] if (m["meta"] or {}).get("tool_calls")]
    assert call["meta"]["tool_calls"] == [
        {"name": "memory_correct", "arguments": {"id": old["id"], "value": "Porto"}}
    ]
    kept = await navi.call("memory.get", {"args": [old["id"]]})
    assert (kept["value"], kept["status"]) == ("Lisbon", "active")
    assert await navi.call("memory.versions", {"args": [old["id"]]}) == []
    # The model read why.
    [sent] = [
        r.body["messages"][-1]
        for r in navi.fake.requests
        if r.path == "/api/chat" and r.body["messages"][-1]["role"] == "tool"
    ]
    assert json.loads(sent["content"]) == tool["result"]


async def test_bad_correct_and_stats_calls_get_errors_that_name_the_argument(
    navi: Daemon,
) -> None:
    old = await _add(navi, "Lisbon", key="home city", category="profile")
    summary = await _add(navi, "We talked about trains.", kind="episode")
    oid = old["id"]
    calls = [
        ("memory_correct", {"value": "Porto"}),
        ("memory_correct", {"id": "seven", "value": "Porto"}),
        ("memory_correct", {"id": oid}),
        ("memory_correct", {"id": oid, "value": "   "}),
        ("memory_correct", {"id": oid, "value": ["Porto"]}),
        ("memory_correct", {"id": oid, "value": "Porto", "reason": "moved"}),
        ("memory_correct", {"id": 999, "value": "Porto"}),
        ("memory_correct", {"id": summary["id"], "value": "Porto"}),
        ("memory_correct", {"id": oid, "value": "Lisbon"}),
        ("memory_stats", {"category": "profile"}),
        # Near misses a small model makes are taken as meant: "#12" for 12.
        ("memory_correct", {"id": f"#{oid}", "value": "Porto"}),
    ]
    _, tools = await _turn(navi, "I moved to Porto, please update my home city.", *calls)
    errors = [t["result"].get("error") for t in tools[:-1]]
    assert errors == [
        "bad arguments for memory_correct: missing id: must be an integer (the memory's id,"
        " from memory_search)",
        "bad arguments for memory_correct: id must be an integer (the memory's id, from"
        " memory_search), got 'seven'",
        "bad arguments for memory_correct: missing value: must be text (the new value, e.g. Porto)",
        "bad arguments for memory_correct: value must be the new value as text, e.g. Porto",
        "bad arguments for memory_correct: value must be text (the new value, e.g. Porto),"
        " got ['Porto']",
        "bad arguments for memory_correct: unknown argument 'reason'; it takes id (required),"
        " value (required)",
        "no memory with id 999",
        f"bad arguments for memory_correct: memory {summary['id']} is of kind 'episode': only"
        " a fact or a rule can be corrected (find the fact with memory_search)",
        f"memory {oid} already has that value",
        "bad arguments for memory_stats: unknown argument 'category'; this tool takes no arguments",
    ]
    assert all(t["meta"] is None for t in tools)  # errors, not refusals
    assert tools[-1]["result"]["corrected"] is True
    versions = await navi.call("memory.versions", {"args": [tools[-1]["result"]["id"]]})
    assert [v["id"] for v in versions] == [oid]  # one correction, from the good call only


async def test_a_correction_cannot_bring_back_a_forgotten_value(navi: Daemon) -> None:
    lisbon = await _add(navi, "Lisbon", key="home city", category="profile")
    await navi.call("memory.forget", {"args": [lisbon["id"]]})
    porto = await _add(navi, "Porto", key="home city", category="profile")
    _, [tool] = await _turn(
        navi,
        "Actually I moved back to Lisbon.",
        ("memory_correct", {"id": porto["id"], "value": "Lisbon"}),
    )
    assert tool["result"]["corrected"] is False
    assert "made Navi forget" in tool["result"]["message"]
    current = await navi.call("memory.get", {"args": [porto["id"]]})
    assert (current["value"], current["status"]) == ("Porto", "active")


# -- memory_forget needs the user's request -----------------------------------------------------


async def test_forget_is_refused_without_a_request_and_done_with_one(navi: Daemon) -> None:
    old = await _add(navi, "Lisbon", key="home city", category="profile")
    sid, [refused] = await _turn(
        navi, "Tell me something about my city.", ("memory_forget", {"id": old["id"]})
    )
    assert refused["result"]["error"].startswith(
        "refused: the user's last message does not ask to forget anything"
    )
    assert refused["meta"] == {"refused": "the user's last message does not ask to forget anything"}
    assert (await navi.call("memory.get", {"args": [old["id"]]}))["value"] == "Lisbon"

    _, [done] = await _turn(
        navi, "Please forget my home city.", ("memory_forget", {"id": old["id"]}), sid=sid
    )
    assert done["result"] == {"forgotten": [old["id"]]}
    assert done["meta"] is None
    listed = await navi.call("memory.list", {"kwargs": {"status": None}})
    assert old["id"] not in [m["id"] for m in listed["memories"]]


# -- memory_stats -------------------------------------------------------------------------------


async def test_stats_counts_by_kind_and_category_and_tells_the_newest(navi: Daemon) -> None:
    await _add(navi, "Lisbon", key="home city", category="profile")
    await _add(navi, "Rust", key="main language", category="technical")
    await _add(navi, "Helix", key="editor", category="technical")
    await _add(navi, "Answer in French", kind="rule")
    await _add(navi, "asthma", key="condition", category="health", status="held")
    newest = await _add(navi, "Oat milk", key="milk", category="preferences")
    _, [tool] = await _turn(navi, "How much do you know about me?", ("memory_stats", {}))
    assert tool["result"] == {
        "current": {"fact": 4, "episode": 0, "rule": 1, "reflection": 0},
        "facts_by_category": {"profile": 1, "technical": 2, "preferences": 1},
        "held_for_review": 1,
        "pinned": 0,
        "sessions": 1,
        "newest_memory_at": newest["created_at"],
    }


# -- what counts as the user's request ----------------------------------------------------------


@pytest.mark.parametrize(
    ("said", "forget"),
    [
        ("Please forget my home city.", True),
        ("Delete what you know about my sister", True),
        ("Remove that from your memory", True),
        ("Oublie mon adresse, s'il te plaît", True),
        ("Lösche bitte meine Adresse", True),
        ("olvídate de mi dirección", True),
        ("Esquece o meu endereço", True),
        ("забудь мой адрес", True),
        ("请删除我的地址", True),
        ("住所を忘れて", True),
        ("Don't forget my birthday! But forget my old address.", True),
        ("Don't forget my birthday!", False),
        ("N'oublie pas mon anniversaire", False),
        ("no te olvides de mi cumpleaños", False),
        ("别忘了我的生日", False),
        ("I don't remember where I parked.", False),
        ("Can I borrow your pen?", False),
        ("Hello", False),
    ],
)
def test_what_asks_to_forget(said: str, forget: bool) -> None:
    assert asks_to_forget(said) is forget


@pytest.mark.parametrize(
    ("said", "value", "correct"),
    [
        ("I moved to Porto.", "Porto", True),  # a change word
        ("My editor is Helix", "Helix", True),  # the new value, stated
        ("Please update it.", "Porto", True),
        ("That's wrong, it's Rust", "Rust", True),
        ("Ich bin nach Köln umgezogen", "Köln", True),
        ("En fait, j'habite à Porto", "Porto", True),
        ("我搬到上海了", "上海", True),
        ("What's the weather in Porto?", "Porto", False),  # a question names it, not states
        ("Tell me a joke", "Porto", False),
        ("I like Lisbon", "Porto", False),
    ],
)
def test_what_asks_to_correct(said: str, value: str, correct: bool) -> None:
    assert asks_to_correct(said, value) is correct
