"""A send that fails: the daemon keeps the message before it asks for the reply, and its
error says whether it did; the app gives the words back only when they were not kept. Before,
the app asked the daemon afterwards and took "cannot ask" (the daemon killed mid-reply) as
"not kept": a stored message and the part of its reply shown left the screen, back in the
prompt to be sent and stored twice. In incognito a failed message was not kept at all, and
Ctrl+R answered the turn before it, under it. A real daemon, the app through Pilot, the fake
Ollama."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from navi_desktop.daemon.client import DaemonClient, RpcCallError
from navi_desktop.tui.app import NaviApp
from navi_desktop.tui.chat.messages import MessageView
from tests.daemon_home import Home, navi_home
from tests.fake_ollama import Reply
from tests.tui_support import SIZE, Daemon, until


def shown(app: NaviApp) -> list[tuple[str, str]]:
    return [(v.role, v.text) for v in app.screen.query(MessageView)]


def notes(app: NaviApp) -> list[str]:
    return [str(label.render()) for label in app.screen.query(".note")]


async def stored(h: Home) -> list[tuple[str, str]]:
    async with await DaemonClient.connect(h.socket) as client:
        [session] = await client.call("sessions.list", {})
        found = await client.call("sessions.show", {"id": session["id"]})
    return [(m["role"], m["content"]) for m in found["messages"]]


async def test_the_error_of_a_failed_send_says_whether_the_message_was_kept(daemon: Daemon, fake):
    session = (await daemon.call("sessions.create", {}))["id"]
    fake.script(Reply(status=500, error="model crashed"))
    with pytest.raises(RpcCallError, match="model crashed") as failed:
        await daemon.call("chat.send", {"text": "hello", "session_id": session})
    [said] = (await daemon.call("sessions.show", {"id": session}))["messages"]
    assert failed.value.data["stored"] is True
    assert failed.value.data["user_message_id"] == said["id"]

    with pytest.raises(RpcCallError) as refused:
        await daemon.call("chat.send", {"text": "hello", "session_id": "no-such-session"})
    assert refused.value.data["stored"] is False

    incognito = (await daemon.call("sessions.create", {"incognito": True}))["id"]
    fake.script(Reply(status=500, error="model crashed"))
    with pytest.raises(RpcCallError, match="model crashed") as failed:
        await daemon.call("chat.send", {"text": "a secret", "session_id": incognito})
    assert failed.value.data["stored"] is True and "user_message_id" not in failed.value.data


@pytest.mark.parametrize("words", [["Part ", "one "], []], ids=["mid-reply", "before-reply"])
async def test_a_message_the_killed_daemon_kept_stays_on_screen(words: list[str]) -> None:
    """Killed after its part of the reply was shown, or before the reply began: the message
    stays on screen, never in the prompt, and once the daemon is back, Ctrl+R answers it; it
    is stored once."""
    with navi_home() as h:
        pid = await asyncio.to_thread(h.start)
        h.fake.script(Reply(chunks=words, hang=True))
        app = NaviApp(h.paths, autostart=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.status.memories is not None)
            await pilot.press(*"hello", "enter")
            if words:
                await until(pilot, lambda: ("assistant", "Part one ") in shown(app))
            else:  # the model was asked: the message was stored before that
                await until(pilot, lambda: any(r.path == "/api/chat" for r in h.fake.requests))
            os.kill(pid, signal.SIGKILL)
            await until(pilot, lambda: app.screen.reply is None)
            prompt = app.screen.query_one("#prompt")
            assert prompt.text == ""
            assert shown(app) == [("user", "hello"), ("assistant", "".join(words))]
            [note] = notes(app)
            unsure = "may not have been saved" in note  # nothing of the reply told it was
            assert note.startswith("⚠") and unsure is not bool(words)

            await asyncio.to_thread(h.start)
            await until(pilot, lambda: app.status.daemon == "up", timeout=20)
            h.fake.script(Reply("Hi."))
            await pilot.press("ctrl+r")
            again = [("user", "hello"), ("assistant", "Hi.")]
            await until(pilot, lambda: app.screen.reply is None and shown(app) == again, timeout=30)
        assert await stored(h) == again


async def test_ctrl_r_after_a_failed_incognito_send_answers_that_message(daemon: Daemon, fake):
    app = NaviApp(daemon.paths, autostart=False, incognito=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.status.memories is not None)
        fake.script(Reply("One."))
        await pilot.press(*"hello", "enter")
        await until(pilot, lambda: app.screen.reply is None and len(shown(app)) == 2)
        fake.script(Reply(status=500, error="model crashed"))
        await pilot.press(*"second", "enter")
        await until(pilot, lambda: app.screen.reply is None and len(shown(app)) == 4)
        assert shown(app)[2] == ("user", "second")  # kept on screen, as it is in the daemon
        asked: list[str] = []

        def answer(body: dict) -> Reply:
            asked.append([m["content"] for m in body["messages"] if m["role"] == "user"][-1])
            return Reply("Two.")

        fake.script(answer)
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.screen.reply is None and ("assistant", "Two.") in shown(app))
        assert asked == ["second"]
        assert shown(app) == [
            ("user", "hello"),
            ("assistant", "One."),
            ("user", "second"),
            ("assistant", "Two."),
        ]


async def test_a_message_sent_with_the_daemon_stopped_comes_back_to_the_prompt(
    daemon: Daemon, fake
) -> None:
    """Not sent at all (no connection): nothing to keep on screen, the words are back."""
    app = NaviApp(daemon.paths, autostart=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.status.memories is not None)
        fake.script(Reply("One."))
        await pilot.press(*"hello", "enter")
        await until(pilot, lambda: app.screen.reply is None and len(shown(app)) == 2)
        await daemon.stop()
        await until(pilot, lambda: app.status.daemon == "down")
        await pilot.press(*"again", "enter")
        await until(pilot, lambda: app.screen.query_one("#prompt").text == "again")
        assert shown(app) == [("user", "hello"), ("assistant", "One.")]
