"""Forgetting in the app: the dialog shows where else a memory's value occurs and lets the
user narrow it; a scrub that waited for another reader is announced when it completes."""

from __future__ import annotations

from textual.widgets import Button, Static

from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.inspector.screen import InspectorScreen
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
        # what the user said there in other words stays, and the dialog says how to remove it
        assert "other wordings of it there stay." in body
        assert f"to remove them: navi sessions delete {sid} --profile tester" in body
        await pilot.click("#choice-evidence")
        await until(pilot, lambda: cat["id"] not in screen.memory_list.memories)
    shown = await daemon.call("sessions.show", {"id": sid})
    said = [m["content"] for m in shown["messages"] if m["role"] == "user"]
    assert said == ["[forgotten].", "Miso broke a vase today."]  # the user chose the evidence


async def test_at_80x24_the_learned_in_line_fits_with_the_buttons(daemon: Daemon) -> None:
    """Two versions learned in two sessions, each named by a long first message: the dialog
    stays on screen, its buttons visible, and the body scrolls to both commands."""
    long = "So, about the cat we adopted last winter from the shelter down the road: "
    first = await _said(daemon, long + "her name is Miso.")
    second = await _said(daemon, long + "we renamed her Mochi.")
    for name, sid in (("Miso", first), ("Mochi", second)):
        cat = (
            await daemon.call(
                "memory.add", {"args": [name], "kwargs": {"key": "cat", "session_id": sid}}
            )
        )["memory"]
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.link.connected)
        await pilot.press("f3")
        await until(pilot, lambda: isinstance(app.screen, InspectorScreen))
        screen = app.screen
        assert isinstance(screen, InspectorScreen)
        await highlight(pilot, screen, cat["id"])
        await pilot.press("f")
        await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen")
        await pilot.pause(0.2)
        body = str(app.screen.query_one(".body", Static).render())
        assert (
            f"navi sessions delete {second} --profile tester;"
            f" navi sessions delete {first} --profile tester\n"
        ) in body
        whole = app.screen.query_one("Vertical").region
        assert whole.y >= 0 and whole.bottom <= 24 and whole.x >= 0 and whole.right <= 80
        for button in app.screen.query(Button):
            assert button.region.bottom <= 24 and button.region.right <= 80
            assert button.region.height > 0


async def test_a_completed_delayed_scrub_is_announced(daemon: Daemon) -> None:
    async with inspector(daemon) as (app, pilot, _screen):
        app._on_daemon_event("memory.scrubbed", {"profile": "tester", "ids": [7]})
        await until(
            pilot,
            lambda: any("no longer holds any copy" in str(n.message) for n in app._notifications),
        )
