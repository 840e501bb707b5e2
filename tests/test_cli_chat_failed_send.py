"""`navi chat` whose send fails says in its one line whether the message was kept, so that
the user knows whether to send it again: the daemon keeps it before it asks for the reply,
and its error tells (``data.stored``). Before, the line said only what failed: a message the
daemon had saved was sent (and saved) again. A real daemon, the real CLI as a subprocess,
the fake Ollama."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.daemon_home import Home, navi_home, one_line
from tests.fake_ollama import Reply
from tests.test_cli_chat_cancelled import chat_process, chats, read_until

SAVED = (
    "your message was saved in session {}: open it in the app (`navi`) and press Ctrl+R for"
    " its answer rather than send it again"
)


@pytest.fixture
def h() -> Iterator[Home]:
    with navi_home() as home:
        yield home


def said(h: Home, session: str) -> list[str]:
    """The session's messages as `navi sessions show` lists them."""
    shown = h.navi("sessions", "show", session)
    assert shown.returncode == 0, shown.stderr
    return [line.split("] ", 1)[1] for line in shown.stdout.splitlines()]


def test_a_message_saved_before_the_model_failed_is_said_saved_with_its_session(h) -> None:
    h.fake.script(Reply(status=500, error="model crashed"))
    failed = h.navi("chat", "hello there")  # a new session: only the error names it
    line = one_line(failed)
    assert line.startswith("navi: Ollama refused the chat") and "model crashed" in line
    session = line.split("saved in session ")[1].split(":")[0]
    assert line.endswith("; " + SAVED.format(session)), line
    assert said(h, session) == ["user: hello there"]


def test_a_reply_that_failed_mid_way_says_the_message_is_saved(h) -> None:
    session = h.navi("chat", "hello").stderr.split()[-1]
    h.fake.script(Reply(chunks=["Part ", "one "], error="llama runner process has terminated"))
    failed = h.navi("chat", "--session", session, "tell me more")
    assert failed.stdout == "Part one \n"
    assert one_line(failed).endswith("terminated; " + SAVED.format(session))
    assert said(h, session)[-2:] == ["user: tell me more", "assistant: Part one "]


def test_a_refused_message_is_said_not_saved(h) -> None:
    h.start()
    refused = h.navi("chat", "--session", "0123456789ab", "hello")
    assert one_line(refused, 2) == (
        "navi: no session with id '0123456789ab'; your message was not saved"
    )


def test_an_incognito_message_kept_is_said_kept_in_the_daemon_only(h) -> None:
    h.fake.script(Reply(status=500, error="model crashed"))
    line = one_line(h.navi("chat", "--incognito", "a secret"))
    assert "; your message is kept in incognito session incognito-" in line, line
    assert line.endswith(", in the daemon only")


@pytest.mark.parametrize("words", [[b"Part ", b"one "], []], ids=["mid-reply", "before-reply"])
def test_the_daemon_killed_during_the_reply(h, words: list[bytes]) -> None:
    """A word of the reply proves the message was saved; with none, nothing tells."""
    session = h.navi("chat", "hello").stderr.split()[-1]
    asked = chats(h.fake)
    h.fake.script(Reply(chunks=[w.decode() for w in words], hang=True))
    chat = chat_process(h, "--session", session, "and you?")
    try:
        if words:
            read_until(chat, b"one ")
        deadline = time.monotonic() + 60
        while chats(h.fake) == asked:  # the model was asked: the message is saved by now
            assert time.monotonic() < deadline, "the chat never reached the model"
            time.sleep(0.05)
        os.kill(int(h.lock.read_text()), signal.SIGKILL)
        _, err = chat.communicate(timeout=60)
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait()
    assert chat.returncode == 1
    [line] = err.decode().strip().splitlines()
    if words:
        assert line == f"navi: the daemon closed the connection; {SAVED.format(session)}"
    else:
        assert line == (
            "navi: the daemon closed the connection; your message may not have been saved:"
            f" see `navi sessions show {session}` once the daemon is back"
        )
    assert said(h, session)[-1] == "user: and you?"  # it was: the daemon saves it first
