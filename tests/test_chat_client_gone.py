"""A client that goes away (Ctrl+C in `navi chat`, a closed app, a killed script) while the
model is stalled ends its turn at once, as a stop does: what came is kept, marked cancelled,
and the session takes its next turn. Before, the daemon noticed only when the next word came
to be sent: a stalled model held the turn, and the session, for minutes ("already
answering"). A client that only ends its sending half still gets its answer (see
test_daemon_reliability). A real daemon on a real socket and the fake Ollama."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from navi_desktop.daemon.client import DaemonClient
from tests.fake_ollama import Reply
from tests.tui_support import Daemon, socket_path

BOUND_S = 60.0  # generous: the turn ends well before, on a busy machine too


async def first_delta(client: DaemonClient) -> str:
    async for note in client.notifications():
        if note.method == "chat.delta":
            return str(note.params["session_id"])
    raise AssertionError("the connection closed before the reply began")


async def ended(daemon: Daemon, session: str) -> dict:
    """The session's stored reply once the turn has ended (polled; no timing asserted)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BOUND_S
    while True:
        messages = (await daemon.call("sessions.show", {"id": session}))["messages"]
        if messages[-1]["role"] == "assistant":
            return messages[-1]
        assert loop.time() < deadline, f"the turn did not end: {messages}"
        await asyncio.sleep(0.1)


async def next_turn_is_taken(daemon: Daemon, fake, session: str) -> None:
    fake.script(Reply("Next."))
    answered = await daemon.call("chat.send", {"text": "and then?", "session_id": session})
    assert answered["reply"] == "Next." and not answered["cancelled"]


async def test_a_client_closed_while_the_model_stalls_ends_its_turn(daemon: Daemon, fake) -> None:
    session = (await daemon.call("sessions.create", {}))["id"]
    fake.script(Reply(chunks=["Once "], hang=True))  # one chunk, then nothing
    client = await DaemonClient.connect(socket_path(daemon.paths))
    call = asyncio.ensure_future(
        client.call("chat.send", {"text": "a story", "session_id": session})
    )
    assert await asyncio.wait_for(first_delta(client), BOUND_S) == session
    await client.close()
    call.cancel()

    reply = await ended(daemon, session)
    assert reply["content"] == "Once " and reply["meta"]["cancelled"] is True
    await next_turn_is_taken(daemon, fake, session)


async def test_ctrl_c_in_navi_chat_while_the_model_stalls_ends_the_turn(
    daemon: Daemon, fake
) -> None:
    session = (await daemon.call("sessions.create", {}))["id"]
    fake.script(Reply(chunks=["Once "], hang=True))
    home = daemon.paths.config.parent  # make_home's NAVI_HOME
    environ = os.environ | {"NAVI_HOME": str(home), "OLLAMA_HOST": fake.url}
    chat = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "navi_desktop", "chat", "--session", session, "a story"),
        env=environ,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert chat.stdout is not None
    try:
        assert await asyncio.wait_for(chat.stdout.readexactly(5), BOUND_S) == b"Once "
        chat.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(chat.communicate(), BOUND_S)
    finally:
        if chat.returncode is None:
            chat.kill()
            await chat.wait()
    assert chat.returncode == 130, err
    said = f"navi: stopped (Ctrl+C): what came of the reply is kept in session {session}"
    assert err.decode().strip() == said

    reply = await ended(daemon, session)
    assert reply["content"] == "Once " and reply["meta"]["cancelled"] is True
    await next_turn_is_taken(daemon, fake, session)


async def test_a_client_closed_right_after_sending_frees_the_session(daemon: Daemon, fake) -> None:
    """Gone before the turn began (it asks to stop with its client only after a few awaits):
    the turn still ends, and the session takes the next one."""
    import json
    import socket

    session = (await daemon.call("sessions.create", {}))["id"]
    fake.script(Reply(chunks=[], hang=True))
    frame = {"jsonrpc": "2.0", "id": 1, "method": "chat.send"}
    frame["params"] = {"text": "a story", "session_id": session}
    with socket.socket(socket.AF_UNIX) as raw:
        raw.connect(str(socket_path(daemon.paths)))
        raw.sendall(json.dumps(frame).encode() + b"\n")  # then closed at once
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BOUND_S
    fake.script(Reply("Next."))
    while True:
        try:
            answered = await daemon.call("chat.send", {"text": "and then?", "session_id": session})
        except Exception as exc:
            assert "already answering" in str(exc) and loop.time() < deadline, exc
            await asyncio.sleep(0.1)
            continue
        assert answered["reply"] == "Next."
        return
