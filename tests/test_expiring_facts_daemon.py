"""Facts that expire, and confirming, through the real daemon on its socket: the ``memory.*``
methods, the chat model's tools (the fake Ollama's tool calls), and the memory inspector
driven with Pilot."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from textual.widgets import Input

from navi_desktop.daemon.client import DaemonClient, RemoteInvalidInput, RemoteNotFound
from navi_desktop.daemon.main import socket_path
from navi_desktop.daemon.memory_api import RemoteMemory
from navi_desktop.memory.clock import iso, parse_iso
from navi_desktop.tui.dialogs import TextScreen
from tests.fake_ollama import Reply
from tests.test_tui_inspector import add, detail_plain, highlight, inspector, rows
from tests.tui_support import Daemon, until


def ahead(days: float) -> str:
    return iso(datetime.now(UTC) + timedelta(days=days))


async def memory(daemon: Daemon, memory_id: int) -> dict[str, Any]:
    return await daemon.call("memory.get", {"args": [memory_id]})


async def every(daemon: Daemon) -> list[dict[str, Any]]:
    reply = await daemon.call("memory.list", {"kwargs": {"status": None, "sort": "id"}})
    return reply["memories"]


# -- memory.* over the socket -------------------------------------------------------------------


async def test_add_edit_and_confirm_over_the_socket(daemon: Daemon) -> None:
    when = ahead(5)
    added = await add(daemon, "in Berlin", key="location", category="profile", expires_at=when)
    assert added["expires_at"] == when
    hits = await daemon.call("memory.search", {"args": ["Berlin"]})
    assert [h["id"] for h in hits] == [added["id"]]

    later = ahead(9)
    edited = await daemon.call(
        "memory.edit", {"args": [added["id"]], "kwargs": {"expires_at": later}}
    )
    assert edited["expires_at"] == later

    confirmed = await daemon.call("memory.confirm", {"args": [added["id"]]})
    assert (confirmed["pinned"], confirmed["confidence"]) == (True, 1.0)
    assert confirmed["last_verified_at"] is not None
    history = await daemon.call("memory.history", {"args": [added["id"]]})
    assert [h["action"] for h in history] == ["create", "edit", "confirm"]

    cleared = await daemon.call(
        "memory.edit", {"args": [added["id"]], "kwargs": {"expires_at": None}}
    )
    assert cleared["expires_at"] is None


@pytest.mark.parametrize(
    ("method", "params", "needle"),
    [
        ("memory.add", {"args": ["v"], "kwargs": {"expires_at": "2020-01-01"}}, "is in the past"),
        ("memory.add", {"args": ["v"], "kwargs": {"expires_at": "next week"}}, "ISO 8601"),
        ("memory.add", {"args": ["v"], "kwargs": {"expires_at": 7}}, "ISO 8601"),
        ("memory.add", {"args": ["v"], "kwargs": {"expires_at": "2099-01-01"}}, "3650 days"),
        (
            "memory.add",
            {"args": ["no emojis"], "kwargs": {"kind": "rule", "expires_at": "2031-01-01"}},
            "only a fact can expire",
        ),
        ("memory.edit", {"args": [1], "kwargs": {"expires_at": "2020-01-01"}}, "in the past"),
        ("memory.edit", {"args": [1], "kwargs": {"expires_at": "Friday"}}, "ISO 8601"),
        ("memory.edit", {"args": [2], "kwargs": {"expires_at": "2031-01-01"}}, "only a fact"),
        ("memory.confirm", {"args": ["1"]}, "memory_id"),
        ("memory.confirm", {"args": [1, 2]}, "takes at most 1"),
        ("memory.confirm", {"args": [2]}, "only a fact can be confirmed"),
    ],
)
async def test_bad_parameters_name_the_problem_and_write_nothing(
    daemon: Daemon, method: str, params: dict[str, Any], needle: str
) -> None:
    await add(daemon, "in Berlin", key="location")
    await add(daemon, "answer in French", kind="rule")
    before = await every(daemon)
    with pytest.raises(RemoteInvalidInput) as caught:
        await daemon.call(method, params)
    message = str(caught.value)
    assert needle in message and "\n" not in message and "Traceback" not in message
    assert await every(daemon) == before


async def test_the_cli_client_confirms_and_sets_expiry_through_the_daemon(daemon: Daemon) -> None:
    tea = await add(daemon, "oolong", key="tea", category="preferences")
    async with await DaemonClient.connect(socket_path(daemon.paths)) as client:
        remote = RemoteMemory(client, "tester")
        confirmed = await remote.confirm(tea["id"])
        assert confirmed.pinned and confirmed.last_verified_at is not None
        when = ahead(3)
        assert (await remote.edit(tea["id"], expires_at=when)).expires_at == when
        assert not (await remote.get(tea["id"])).expired()


async def test_confirming_an_unknown_memory_is_not_found(daemon: Daemon) -> None:
    with pytest.raises(RemoteNotFound, match="no memory with id 42"):
        await daemon.call("memory.confirm", {"args": [42]})


# -- the chat model's tools -----------------------------------------------------------------------


async def test_the_model_confirms_a_fact_the_user_says_is_still_true(daemon: Daemon, fake) -> None:
    tea = await add(daemon, "oolong", key="tea", category="preferences", confidence=0.7)
    fake.script(
        Reply(tool_calls=[("memory_confirm", {"id": tea["id"]})]),
        Reply("Noted: still oolong."),
    )
    sent = await daemon.call("chat.send", {"text": "Yes, I still drink oolong."})
    assert sent["reply"] == "Noted: still oolong."
    got = await memory(daemon, tea["id"])
    assert (got["pinned"], got["confidence"]) == (True, 1.0) and got["last_verified_at"]
    history = await daemon.call("memory.history", {"args": [tea["id"]]})
    assert (history[-1]["action"], history[-1]["actor"]) == ("confirm", "assistant")
    shown = await daemon.call("sessions.show", {"id": sent["session_id"]})
    [result] = [m["content"] for m in shown["messages"] if m["role"] == "tool"]
    assert '"confirmed": true' in result


async def test_a_bad_confirm_call_gets_an_error_the_model_can_read(daemon: Daemon, fake) -> None:
    rule = await add(daemon, "no emojis", kind="rule")
    fake.script(
        Reply(tool_calls=[("memory_confirm", {"id": rule["id"]})]),
        Reply(tool_calls=[("memory_confirm", {"id": "that one"})]),
        Reply("Sorry."),
    )
    sent = await daemon.call("chat.send", {"text": "Is that still right?"})
    shown = await daemon.call("sessions.show", {"id": sent["session_id"]})
    results = [m["content"] for m in shown["messages"] if m["role"] == "tool"]
    assert "only a fact can be confirmed" in results[0]
    assert "bad arguments for memory_confirm" in results[1]
    assert (await memory(daemon, rule["id"]))["pinned"] is False


async def test_the_model_saves_a_fact_that_expires(daemon: Daemon, fake) -> None:
    fake.script(
        Reply(
            tool_calls=[
                (
                    "memory_save",
                    {"key": "duty", "value": "on call", "category": "projects", "expires_days": 7},
                ),
                ("memory_save", {"key": "trip", "value": "in Oslo", "expires_days": -2}),
            ]
        ),
        Reply("Saved."),
    )
    sent = await daemon.call("chat.send", {"text": "Remember I am on call this week."})
    listed = [m for m in await every(daemon) if m["kind"] == "fact"]
    assert [m["value"] for m in listed] == ["on call"]  # the bad one wrote nothing
    left = parse_iso(listed[0]["expires_at"]) - datetime.now(UTC)
    assert timedelta(days=6, hours=23) < left <= timedelta(days=7)
    shown = await daemon.call("sessions.show", {"id": sent["session_id"]})
    results = [m["content"] for m in shown["messages"] if m["role"] == "tool"]
    assert "expires_days must be a whole number of days from 1 to 3650" in results[1]


# -- the inspector ------------------------------------------------------------------------------


async def test_the_detail_pane_shows_expiry_and_confirmation(daemon: Daemon) -> None:
    berlin = await add(daemon, "in Berlin", key="location", category="profile", expires_at=ahead(3))
    async with inspector(daemon) as (app, pilot, screen):
        await highlight(pilot, screen, berlin["id"])
        text = " ".join(detail_plain(app).split())
        assert "Expires in 2 days (" in text or "Expires in 3 days (" in text
        assert "Verified" not in text

        await pilot.press("c")
        await until(pilot, lambda: "Verified" in detail_plain(app))
        got = await memory(daemon, berlin["id"])
        assert (got["pinned"], got["confidence"]) == (True, 1.0) and got["last_verified_at"]
        await until(pilot, lambda: "confirmed as still true by you" in detail_plain(app))
        assert "  location: in Berlin 📌" in rows(screen, "facts")


async def test_set_and_clear_an_expiry_with_t(daemon: Daemon) -> None:
    tea = await add(daemon, "oolong", key="tea", category="preferences")
    async with inspector(daemon) as (app, pilot, screen):
        await highlight(pilot, screen, tea["id"])
        await pilot.press("t")
        await until(pilot, lambda: isinstance(app.screen, TextScreen))
        field = app.screen.query_one("#text", Input)
        field.value = "2020-01-01"  # refused in the dialog, which stays open
        await pilot.press("enter")
        await until(pilot, lambda: "is in the past" in str(app.screen.query_one("#error").content))
        assert isinstance(app.screen, TextScreen)
        assert (await memory(daemon, tea["id"]))["expires_at"] is None

        field.value = "2w"
        await pilot.press("enter")
        await until(pilot, lambda: "Expires in 14 days (" in " ".join(detail_plain(app).split()))
        left = parse_iso((await memory(daemon, tea["id"]))["expires_at"]) - datetime.now(UTC)
        assert timedelta(days=13, hours=23) < left <= timedelta(days=14)
        await until(pilot, lambda: "set to expire " in detail_plain(app))

        await pilot.press("t")
        await until(pilot, lambda: isinstance(app.screen, TextScreen))
        app.screen.query_one("#text", Input).value = "never"
        await pilot.press("enter")
        await until(pilot, lambda: "Expires" not in detail_plain(app))
        assert (await memory(daemon, tea["id"]))["expires_at"] is None
        await until(pilot, lambda: "set to never expire" in detail_plain(app))


async def test_confirm_and_expiry_are_commands_for_facts_only(daemon: Daemon) -> None:
    tea = await add(daemon, "oolong", key="tea", category="preferences")
    await add(daemon, "answer in French", kind="rule")
    async with inspector(daemon) as (app, pilot, screen):
        await highlight(pilot, screen, tea["id"])
        titles = {command.title for command in app.get_system_commands(screen)}
        assert {"Confirm still true", "Set expiry"} <= titles

        await pilot.press("4")  # the rules tab
        await until(pilot, lambda: screen.current is not None and screen.current["kind"] == "rule")
        assert screen.can("confirm") is None and screen.can("expires") is None
        titles = {command.title for command in app.get_system_commands(screen)}
        assert not {"Confirm still true", "Set expiry"} & titles
        await pilot.press("c", "t")
        await pilot.pause()
        assert not isinstance(app.screen, TextScreen)
    assert [m["pinned"] for m in await every(daemon)] == [False, False]
