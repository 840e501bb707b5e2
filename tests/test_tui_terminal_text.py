"""Text from a model, a memory or a title reaches the terminal without its control
characters: an escape sequence in it cannot set the window title, clear the screen or write
the clipboard (Textual passes ESC on to the terminal as it is)."""

from __future__ import annotations

from typing import Any

import pytest
from textual import events
from textual.widgets import Input, Label, TextArea

from navi_desktop.daemon.client import DaemonClient, RemoteInvalidInput
from navi_desktop.daemon.main import socket_path
from navi_desktop.terminal_text import safe_data
from navi_desktop.tui.app import NaviApp
from tests.fake_ollama import Reply
from tests.test_tui_inspector import highlight, inspector
from tests.tui_support import SIZE, Daemon, until

# The window title, the clipboard (OSC 52), a cleared screen, a C1 CSI (red text), and a
# right-to-left override that draws what follows reversed.
INJECTED = "\x1b]0;pwned\x07 \x1b]52;c;aGk=\x07 \x1b[2J \x9b31m \u202egnp.exe\u202c"
HARMFUL = ("\x1b]0;", "\x1b]52;", "\x1b[2J", "\x9b", "\x07", "\u202e")


def on_terminal(app: NaviApp) -> str:
    """What the terminal would be sent to draw the whole screen now."""
    return app.screen._compositor.render_update(full=True).render_segments(app.console)


def harmless(text: str) -> bool:
    return not any(sequence in text for sequence in HARMFUL)


async def test_a_reply_and_a_session_title_reach_the_terminal_without_escapes(fake, daemon):
    fake.script(Reply(chunks=["Here: ", INJECTED, " done."], hang=True))
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.status.memories is not None)
        await pilot.press(*"hi", "enter")
        # While it streams: the deltas come in notifications.
        await until(pilot, lambda: "?]0;pwned" in on_terminal(app))
        assert app.screen.reply is not None
        assert harmless(on_terminal(app))
        await pilot.press("escape")
        await until(pilot, lambda: app.screen.reply is None)
        assert harmless(on_terminal(app))
        session_id = app.screen.session_id
        # A title renamed elsewhere comes in a notification, then a reload of the list.
        await daemon.call("sessions.rename", {"id": session_id, "title": f"T {INJECTED}"})
        await until(pilot, lambda: app.screen.sessions.title_of(session_id).startswith("T ?]0;"))
        title = app.screen.query_one("#chat-title", Label)  # the open session's, above it
        await until(pilot, lambda: str(title.render()).startswith("T ?]0;"))
        assert harmless(on_terminal(app))
    # Stored as the model sent it: only what is shown changes.
    shown = await daemon.call("sessions.show", {"id": session_id})
    assert INJECTED in shown["messages"][-1]["content"]


async def test_a_memory_reaches_the_inspector_without_escapes(daemon: Daemon):
    reply = await daemon.call(
        "memory.add", {"args": [f"likes {INJECTED} jazz"], "kwargs": {"key": f"k{INJECTED}"}}
    )
    memory_id = reply["memory"]["id"]
    async with inspector(daemon) as (app, pilot, screen):
        await highlight(pilot, screen, memory_id)
        await until(pilot, lambda: "likes ?]0;pwned" in on_terminal(app))
        assert harmless(on_terminal(app))


async def test_a_paste_reaches_the_prompt_and_the_search_without_escapes(daemon: Daemon):
    async with inspector(daemon) as (app, pilot, screen):
        await pilot.press("slash")  # the inspector's search field
        app.post_message(events.Paste(f"tea {INJECTED}\r\nsecond line"))  # as the driver does
        search = screen.query_one("#search", Input)
        await until(pilot, lambda: search.value.startswith("tea ?]0;pwned?"))
        assert harmless(on_terminal(app))
        await pilot.press("f2")  # the chat: the prompt has the focus
        app.post_message(events.Paste(f"one {INJECTED}\r\ntwo\rthree\tfour"))
        prompt = app.screen.query_one("#prompt", TextArea)
        await until(pilot, lambda: "three" in prompt.text)
        assert prompt.text == "one ?]0;pwned? ?]52;c;aGk=? ?[2J ?31m ?gnp.exe?\ntwo\nthree\tfour"
        assert harmless(on_terminal(app))


async def test_a_client_that_shows_text_gets_it_safe_answers_and_errors(daemon: Daemon):
    async with await DaemonClient.connect(socket_path(daemon.paths)) as shown:
        shown.safe_text = True
        added = await shown.call(
            "memory.add", {"profile": "tester", "args": [f"a {INJECTED} b"], "kwargs": {}}
        )
        assert added["memory"]["value"].startswith("a ?]0;pwned? ?]52;")
        assert harmless(repr(added))
        with pytest.raises(RemoteInvalidInput) as raised:
            await shown.call(
                "memory.add",
                {"profile": "tester", "args": ["x"], "kwargs": {"category": f"c{INJECTED}"}},
            )
        # The daemon quotes the value as JSON (ESC as \\u001b); the C1 CSI came as it was.
        assert "?31m" in str(raised.value) and harmless(str(raised.value))
    # A client that keeps text as stored (an export to a file) reads it unchanged.
    async with await DaemonClient.connect(socket_path(daemon.paths)) as kept:
        got = await kept.call("memory.get", {"profile": "tester", "args": [added["memory"]["id"]]})
        assert got["value"] == f"a {INJECTED} b"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("plain text", "plain text"),
        ("tab\tand\nnewline", "tab\tand\nnewline"),
        ("\x1b[2J\x00\x7f\x9b", "?[2J???"),
        ("a\u202eb\u2066c\u2069 \u200f", "a?b?c? \u200f"),  # bidi overrides; a mark stays
        ({"k\x1b": ["a\x07", 1, None, {"n": "\x85"}]}, {"k?": ["a?", 1, None, {"n": "?"}]}),
        ("/home/h\udce9l\u00e8ne", "/home/h\ufffdl\u00e8ne"),  # a name's byte not UTF-8
    ],
)
def test_safe_data_replaces_control_characters_everywhere(value: Any, shown: Any) -> None:
    assert safe_data(value) == shown


def test_a_file_name_that_is_not_utf8_reaches_the_app_as_one_cell() -> None:
    """A profile's path under a home named in Latin-1 comes over the socket as JSON's escape
    (the daemon's own words keep the bytes); the app gets U+FFFD, one cell as the layout
    counts it, where the escape drew six."""
    from navi_desktop.daemon.wire import decode, encode
    from navi_desktop.terminal_text import FRAME_CONTROL

    frame = encode({"id": 1, "result": {"path": "/home/h\udce9lene/memory.db"}})
    assert FRAME_CONTROL.search(frame)  # the frame is walked, not passed as it is
    assert safe_data(decode(frame)) == {"id": 1, "result": {"path": "/home/h\ufffdlene/memory.db"}}
