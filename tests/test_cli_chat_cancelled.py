"""`navi chat` whose reply is stopped before its end: by another client's ``chat.cancel``, by
`navi daemon stop`, or by SIGTERM to the daemon. Before, the partial reply was printed and
the command exited 0 with no word; now one line says so, and the exit status is 1.

A real daemon on a real socket, the real CLI as a subprocess, and the fake Ollama streaming
a reply that never finishes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from navi_desktop.daemon.client import call_sync
from tests.daemon_home import Home, navi_home
from tests.fake_ollama import Reply, ThreadedFakeOllama

STOPPED = "navi: the reply was stopped before its end (what came is kept in the session)"


@pytest.fixture
def world() -> Iterator[tuple[Home, ThreadedFakeOllama]]:
    with navi_home() as h:
        yield h, h.fake


def read_until(proc: subprocess.Popen[bytes], words: bytes, timeout: float = 30) -> bytes:
    """What the chat printed, read until ``words`` came (the reply is streaming)."""
    assert proc.stdout is not None
    data, deadline = b"", time.monotonic() + timeout
    while words not in data:
        left = deadline - time.monotonic()
        assert left > 0, f"no {words!r} on stdout in time: {data!r}"
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, f"stdout closed before {words!r}: {data!r}"
            data += chunk
    return data


def chat_process(h: Home, *args: str) -> subprocess.Popen[bytes]:
    """``navi chat *args`` started, its output piped as bytes."""
    return subprocess.Popen(
        [sys.executable, "-m", "navi_desktop", "chat", *args],
        env=h.environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def chats(fake: ThreadedFakeOllama) -> int:
    return sum(r.path == "/api/chat" for r in fake.requests)


@pytest.mark.parametrize("how", ["chat.cancel", "daemon stop", "SIGTERM"])
def test_a_reply_stopped_before_its_end_is_said_and_fails(world, how: str) -> None:
    h, fake = world
    first = h.navi("chat", "hello")
    assert first.returncode == 0, first.stderr
    session = first.stderr.split()[-1]

    fake.script(Reply(chunks=["Once ", "upon ", "a time"], hang=True))
    chat = chat_process(h, "--session", session, "a story")
    try:
        shown = read_until(chat, b"a time")  # the whole stream came; the reply hangs there
        if how == "chat.cancel":  # another client (the app's Esc, a script)
            assert call_sync(h.socket, "chat.cancel", {"session_id": session}) == {
                "cancelled": True
            }
        elif how == "daemon stop":
            assert h.navi("daemon", "stop").returncode == 0
        else:
            os.kill(int(h.lock.read_text()), signal.SIGTERM)
        rest, err = chat.communicate(timeout=60)
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait()

    assert (shown + rest).decode() == "Once upon a time\n"
    lines = err.decode().strip().splitlines()
    assert lines == [STOPPED, f"session {session}"], err.decode()
    assert chat.returncode == 1

    # "what came is kept in the session" is true (the daemon starts again if it was stopped)
    show = h.navi("sessions", "show", session)
    assert show.returncode == 0, show.stderr
    assert show.stdout.rstrip().endswith("assistant: Once upon a time"), show.stdout


def test_json_says_cancelled_and_fails_too(world) -> None:
    h, fake = world
    first = h.navi("chat", "hello")
    session = first.stderr.split()[-1]
    asked = chats(fake)
    fake.script(Reply(chunks=["Once ", "upon "], hang=True))
    chat = chat_process(h, "--json", "--session", session, "more")
    try:
        deadline = time.monotonic() + 30
        while chats(fake) == asked:  # the turn's request has not reached the model yet
            assert time.monotonic() < deadline, "the chat never reached the model"
            time.sleep(0.05)
        time.sleep(0.3)  # let the two chunks through
        call_sync(h.socket, "chat.cancel", {"session_id": session})
        out, err = chat.communicate(timeout=60)
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait()
    result = json.loads(out)
    assert result["cancelled"] is True
    assert err.decode().strip().splitlines()[0] == STOPPED
    assert chat.returncode == 1


def test_an_incognito_reply_stopped_claims_nothing_was_kept(world) -> None:
    # An incognito session lives in the daemon only: stopping it keeps nothing of the reply.
    h, fake = world
    h.start()
    fake.script(Reply(chunks=["Once ", "upon "], hang=True))
    chat = chat_process(h, "--incognito", "a story")
    try:
        read_until(chat, b"upon")
        assert h.navi("daemon", "stop").returncode == 0
        _, err = chat.communicate(timeout=60)
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait()
    lines = err.decode().strip().splitlines()
    assert lines[0] == "navi: the reply was stopped before its end", lines
    assert lines[1].startswith("incognito session ") and len(lines) == 2
    assert chat.returncode == 1
