"""Forgetting in the app: the dialog shows where else a memory's value occurs and lets the
user narrow it; a scrub that waited for another reader is announced when it completes."""

from __future__ import annotations

from textual.widgets import Static

from tests.test_tui_inspector import highlight, inspector
from tests.tui_support import Daemon, until


async def _said(daemon: Daemon, *texts: str) -> str:
    """The user says ``texts`` in one session (the fake Ollama answers); its id."""
    sid = None
    for text in texts:
        reply = await daemon.call("chat.send", {"text": text, "session_id": sid})
        sid = reply["session_id"]
    assert sid is not None
    return sid


async def test_the_forget_dialog_shows_where_it_occurs_and_can_keep_other_mentions(
    daemon: Daemon,
) -> None:
    sid = await _said(daemon, "My cat is called Miso.", "Miso broke a vase today.")
    cat = (
        await daemon.call(
            "memory.add",
            {
                "args": ["Miso"],
                "kwargs": {"key": "cat", "evidence": "My cat is called Miso", "session_id": sid},
            },
        )
    )["memory"]
    async with inspector(daemon) as (app, pilot, screen):
        await highlight(pilot, screen, cat["id"])
        await pilot.press("f")
        await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen")
        body = str(app.screen.query_one(".body", Static).render())
        assert "Everywhere, it also goes from: 2 messages in 1 session;" in body
        assert "Only it and its evidence: 1 message in 1 session." in body
        assert "«Miso»" in body or "Miso»" in body
        await pilot.click("#choice-evidence")
        await until(pilot, lambda: cat["id"] not in screen.memory_list.memories)
    shown = await daemon.call("sessions.show", {"id": sid})
    said = [m["content"] for m in shown["messages"] if m["role"] == "user"]
    assert said == ["[forgotten].", "Miso broke a vase today."]  # the user chose the evidence


async def test_a_completed_delayed_scrub_is_announced(daemon: Daemon) -> None:
    async with inspector(daemon) as (app, pilot, _screen):
        app._on_daemon_event("memory.scrubbed", {"profile": "tester", "ids": [7]})
        await until(
            pilot,
            lambda: any("no longer holds any copy" in str(n.message) for n in app._notifications),
        )
