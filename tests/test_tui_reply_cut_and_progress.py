"""What the chat says about a reply cut at its length limit, a session end under way, and
what a session end dropped: the real app through Pilot, a real daemon on a real socket, the
fake Ollama on loopback."""

from __future__ import annotations

import json
from typing import Any

import pytest

from navi_desktop.daemon.client import RpcCallError
from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.chat.messages import MessageView
from navi_desktop.tui.chat.notices import dropped_text, reason_of
from navi_desktop.tui.status import Learning, Status
from navi_desktop.tui.widgets.status_line import StatusLine, render_status
from tests.fake_ollama import FakeOllama, Reply
from tests.pipeline_helpers import MODELS, extraction, fact
from tests.tui_support import CONFIG, SIZE, Daemon, make_home, until

LONG_REPLY = "word " * 600  # far past a 64-token cap
SAID = "I keep bees on the roof of my flat in Lisbon. "


def assistant_notes(app: NaviApp) -> list[str]:
    """The line under each reply ("" for none)."""
    out = []
    for view in app.screen.query(MessageView):
        if view.role == "assistant":
            notes = list(view.query(".note"))
            out.append(str(notes[0].render()) if notes else "")
    return out


def status_text(app: NaviApp) -> str:
    return str(app.screen.query_one(StatusLine).render())


def toasts(app: NaviApp) -> list[str]:
    return [n.message for n in app._notifications]


async def ready(app: NaviApp, pilot: Any) -> None:
    await until(pilot, lambda: app.status.memories is not None)


async def test_a_cut_reply_says_so_and_how_to_allow_longer_ones_also_when_reloaded(fake, tmp_path):
    paths = make_home(tmp_path, fake.url)
    capped = CONFIG.format(host=fake.url).replace(
        'chat_model = "llama3.2"\n', 'chat_model = "llama3.2"\nreply_max_tokens = 64\n'
    )
    paths.config_file.write_text(capped)
    daemon = await Daemon(paths).start()
    try:
        fake.script(Reply("Short and whole."), Reply(LONG_REPLY))
        app = NaviApp(paths, autostart=False)
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            for text in ("hello", "tell me everything"):
                await pilot.press(*text, "enter")
                await until(pilot, lambda: app.screen.reply is None and len(app.screen._views()))
            await until(pilot, lambda: len(assistant_notes(app)) == 2)
            first, second = assistant_notes(app)
            assert first == ""  # a whole reply gets no line
            assert "cut at its length limit" in second
            assert "Settings (F4)" in second and "ollama.reply_max_tokens" in second
            session_id = app.screen.session_id
        assert fake.bodies()[-1]["options"]["num_predict"] == 64

        app = NaviApp(paths, autostart=False)  # the history, read back from the daemon
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await app.screen.action_open_session(session_id)
            notes = assistant_notes(app)
            assert notes[0] == "" and "cut at its length limit" in notes[1]
    finally:
        await daemon.stop()


def extraction_calls(answers: list[Reply]) -> Any:
    """A responder: chat turns get "Noted.", structured requests (session ends) the next of
    ``answers`` (the last one again once they run out)."""
    calls: list[dict[str, Any]] = []

    def answer(body: dict[str, Any]) -> Reply:
        if not body.get("format"):
            return Reply("Noted.")
        calls.append(body)
        return answers[min(len(calls), len(answers)) - 1]

    answer.calls = calls  # type: ignore[attr-defined]
    return answer


async def test_learning_progress_is_on_the_status_line_and_cleared_when_done(tmp_path):
    empty = extraction()
    # Part 2's first request never ends by itself: the end stays in part 2 until a chat turn
    # makes it stand aside; it is sent again (and answered) once the reply is done.
    responder = extraction_calls([empty, Reply(hang=True), empty])
    async with FakeOllama(MODELS, default_reply=responder) as fake:
        daemon = await Daemon(make_home(tmp_path, fake.url)).start()
        try:
            # Two long messages: two chunks (of at most 2,000 tokens each).
            sid = (await daemon.call("chat.send", {"text": SAID * 120}))["session_id"]
            await daemon.call("chat.send", {"text": SAID * 120, "session_id": sid})
            app = NaviApp(daemon.paths, autostart=False)
            async with app.run_test(size=SIZE) as pilot:
                await ready(app, pilot)
                await app.screen.action_open_session(sid)
                assert "learning" not in status_text(app)
                await pilot.press("f10")
                await until(
                    pilot, lambda: "learning from a session: part 2 of 2" in status_text(app)
                )
                assert app.status.learning == (Learning(2, 2, False),)
                await pilot.press(*"hi", "enter")
                await until(pilot, lambda: any("Session ended" in t for t in toasts(app)))
                await until(pilot, lambda: not app.status.learning)
                assert "learning" not in status_text(app)
            # The request in part 2 was given up for the chat turn, then sent again.
            calls = responder.calls
            assert fake.disconnects >= 1 and calls[2]["messages"] == calls[1]["messages"]
        finally:
            await daemon.stop()


async def test_an_end_the_daemon_ran_says_what_was_learned_and_dropped(fake, daemon):
    said = "I live in Porto and I play the cello."
    fake.script(Reply("Nice."))
    first = (await daemon.call("chat.send", {"text": said}))["session_id"]
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await until(pilot, lambda: app.screen.sessions.title_of(first) is not None)
        fake.script(
            Reply("Hello."),  # the new session's reply
            extraction(
                [
                    fact("home city", "Porto", "I live in Porto", category="profile"),
                    fact("editor", "vim", "I use vim every day"),
                    fact("pet", "cat", "my cat Felix"),
                    fact("job", "pilot", "family"),
                ]
            ),
        )
        # Another client starts a session: the daemon ends the first one on its own.
        await daemon.call("chat.send", {"text": "a new topic"})
        await until(pilot, lambda: any("ended" in t for t in toasts(app)))
        (notice,) = [t for t in toasts(app) if "ended" in t]
        assert notice.startswith("Session “I live in Porto and I play the cello.” ended: ")
        assert "1 memory learned" in notice
        assert "dropped 3 of 4: evidence quote not found in the conversation (×2)" in notice
        assert "quote too short to show anything" in notice


def test_a_long_list_of_reasons_is_capped_and_counted():
    dropped = [f"key{i}: value: reason number {i} ('detail {i}')" for i in range(6)]
    dropped += ["a: b: looks like a secret, never kept"] * 2
    text = dropped_text({"dropped": dropped, "offered": 10})
    assert text.startswith("dropped 8 of 10: looks like a secret, never kept (×2); ")
    assert text.endswith("; and 4 more reasons")
    assert text.count(";") == 3
    assert reason_of("fact #2 (editor: vim): empty value") == "empty value"
    assert reason_of("the answer was cut off at the output limit (its last item is lost)") == (
        "the answer was cut off at the output limit"
    )
    assert json.dumps(text)  # plain text, nothing else


def test_the_status_line_names_the_part_and_fits_80_columns():
    status = Status(
        daemon="up",
        ollama_host="http://127.0.0.1:11434",
        ollama_reachable=True,
        chat_model="llama3.2",
        counts={"fact": {"active": 12}},
        profile="tester",
        learning=(Learning(2, 5, False),),
    )
    assert "learning from a session: part 2 of 5" in str(render_status(status))
    at_80 = render_status(status, 80)
    assert at_80.cell_len <= 78 and "profile tester" in str(at_80)
    assert "learning: part 2 of 5" in str(at_80)
    narrow = render_status(status, 70)
    assert narrow.cell_len <= 68 and "learning 2/5" in str(narrow)
    two = Status(learning=(Learning(0, 0, True), Learning(1, 3, False)), profile="x")
    assert "learning from 2 sessions…" in str(render_status(two))


async def test_a_reply_the_server_cut_short_says_so_when_reloaded(fake, daemon):
    """The part kept of a reply the server broke off read, reloaded, as a whole reply."""
    session = (await daemon.call("sessions.create", {}))["id"]
    fake.script(Reply(chunks=["Once ", "upon "], error="llama runner process has terminated"))
    with pytest.raises(RpcCallError, match="terminated"):
        await daemon.call("chat.send", {"text": "tell me a story", "session_id": session})
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await app.screen.action_open_session(session)
        assert assistant_notes(app) == ["(cut short: the model server failed before its end)"]
