"""Entity profiles through a real daemon on a real socket (real store file, the fake Ollama):
the ``memory.entity*`` methods and their declared parameters, ``RemoteMemory`` (the CLI's
client), the ``memory.changed`` notice, and the chat model's ``memory_entity`` tool."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from navi_desktop.daemon.client import DaemonClient, RemoteInvalidInput, RemoteNotFound
from navi_desktop.daemon.main import socket_path
from navi_desktop.daemon.memory_api import RemoteMemory
from navi_desktop.memory.entity_profiles import EntityProfile
from tests.fake_ollama import Reply


async def add(daemon: Any, value: str, **fields: Any) -> int:
    reply = await daemon.call("memory.add", {"args": [value], "kwargs": fields})
    return reply["memory"]["id"]


async def seed(daemon: Any) -> dict[str, int]:
    return {
        "home": await add(daemon, "moved to Lisbon last year", key="home city"),
        "pastry": await add(daemon, "Lisboa has the best pastel de nata"),
        "sister": await add(daemon, "Joana lives in Porto", key="sister"),
    }


async def test_remote_memory_answers_as_the_store_does(daemon):
    ids = await seed(daemon)
    async with await DaemonClient.connect(socket_path(daemon.paths)) as client:
        remote = RemoteMemory(client, "tester")
        profile = await remote.entity("lisbon")
        assert isinstance(profile, EntityProfile)
        assert [m.id for m in profile.facts] == [ids["home"]]
        merged = await remote.merge_entities("lisbon", "Lisboa")
        assert (merged.name, merged.aliases, merged.mentions) == ("lisbon", ["lisboa"], 2)
        assert {m.id for m in merged.facts} == {ids["home"], ids["pastry"]}
        renamed = await remote.rename_entity("lisboa", "Lisbon")
        assert (renamed.name, renamed.aliases) == ("Lisbon", ["lisboa"])
        page, total = await remote.list_entities(sort="name", limit=2)
        assert ([e.name for e in page], total) == (["joana", "Lisbon"], 3)
        with pytest.raises(RemoteNotFound, match="no entity named 'lisbn'; did you mean 'Lisbon'"):
            await remote.entity("lisbn")
        with pytest.raises(RemoteInvalidInput, match="there is already an entity named 'porto'"):
            await remote.rename_entity("Lisbon", "Porto")
        with pytest.raises(RemoteInvalidInput, match="cannot merge 'Lisbon' with itself"):
            await remote.merge_entities("lisbon", "Lisbon")


@pytest.mark.parametrize(
    ("method", "params", "error"),
    [
        ("memory.entity", {"args": [""]}, "parameter 'name' must be an entity's name of 1 to"),
        ("memory.entity", {"args": ["  "]}, "parameter 'name' must not be blank"),
        ("memory.entity", {"args": [7]}, "parameter 'name' must be an entity's name"),
        ("memory.entity", {}, "missing required parameter 'name'"),
        ("memory.entity", {"args": ["a"], "kwargs": {"limit": 0}}, "parameter 'limit' must be"),
        ("memory.entities", {"kwargs": {"sort": "size"}}, "parameter 'sort' must be one of"),
        ("memory.entities", {"kwargs": {"offset": -1}}, "parameter 'offset' must be"),
        ("memory.merge_entities", {"args": ["a"]}, "missing required parameter 'other'"),
        ("memory.rename_entity", {"args": ["a", "x" * 201]}, "parameter 'new_name' must be"),
        ("memory.rename_entity", {"args": ["a"], "kwargs": {"new": "b"}}, "unknown parameter"),
    ],
)
async def test_bad_parameters_get_one_line(daemon, method, params, error):
    await seed(daemon)
    with pytest.raises(RemoteInvalidInput) as caught:
        await daemon.call(method, params)
    assert error in str(caught.value)
    assert "\n" not in str(caught.value)


async def test_a_merge_or_rename_tells_subscribers(daemon):
    await seed(daemon)
    async with await DaemonClient.connect(socket_path(daemon.paths)) as client:
        await client.subscribe("memory")
        notes = client.notifications()
        await client.call(
            "memory.merge_entities", {"profile": "tester", "args": ["lisbon", "lisboa"]}
        )
        note = await asyncio.wait_for(notes.__anext__(), 5)
        assert (note.method, note.params["method"]) == ("memory.changed", "memory.merge_entities")
        await client.call("memory.rename_entity", {"profile": "tester", "args": ["joana", "Jo"]})
        note = await asyncio.wait_for(notes.__anext__(), 5)
        assert note.params["method"] == "memory.rename_entity"


def tool_results(shown: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in shown["messages"] if m["role"] == "tool"]


async def test_the_chat_model_asks_about_an_entity(daemon, fake):
    ids = await seed(daemon)
    await daemon.call("memory.merge_entities", {"args": ["lisbon", "lisboa"]})
    fake.script(
        Reply(
            tool_calls=[
                ("memory_entity", {"name": "Lisboa"}),
                ("memory_entity", {"name": "Lisbn"}),
                ("memory_entity", {}),
                ("memory_entity", {"name": " "}),
            ]
        ),
        Reply("You moved to Lisbon last year."),
    )
    sent = await daemon.call("chat.send", {"text": "Tell me everything about Lisboa"})
    assert sent["reply"] == "You moved to Lisbon last year."
    shown = await daemon.call("sessions.show", {"id": sent["session_id"]})
    found, unknown, missing, blank = tool_results(shown)
    assert found == {
        "name": "lisbon",
        "type": None,
        "aliases": ["lisboa"],
        "mentions": 3,  # the two facts, and the question itself
        "facts": [
            {"id": ids["pastry"], "text": "user: Lisboa has the best pastel de nata"},
            {"id": ids["home"], "text": "user home city: moved to Lisbon last year"},
        ],
        "facts_total": 2,
        "summaries": [],
        "summaries_total": 0,
    }
    assert unknown == {
        "error": "no entity named 'Lisbn'; did you mean 'lisbon'? (memory_search finds"
        " memories by any words)"
    }
    assert missing["error"].startswith("bad arguments for memory_entity: missing name")
    assert "empty" in blank["error"]
    # The model read the answers it was given.
    last = fake.bodies()[-1]["messages"]
    assert next(json.loads(m["content"]) for m in last if m["role"] == "tool") == found
