"""What the user saw of a reply is kept when the model server fails mid-way, as a stopped
reply's is: before, a dropped connection or an error line after a few words left only the
user's message in the session, and a reply sent as one enormous piece was stored empty.
Through a real daemon and the fake Ollama."""

from __future__ import annotations

import json

import pytest

from navi_desktop.daemon.client import RpcCallError
from navi_desktop.llm.budget import MAX_CHARS_PER_TOKEN
from tests.fake_ollama import Reply
from tests.tui_support import Daemon


async def messages(daemon: Daemon, session_id: str) -> list[dict]:
    return (await daemon.call("sessions.show", {"id": session_id}))["messages"]


async def test_a_reply_cut_short_by_the_server_keeps_what_came(daemon: Daemon, fake) -> None:
    session = (await daemon.call("sessions.create", {}))["id"]
    fake.script(Reply(chunks=["Lyon ", "is ", "in "], error="llama runner process has terminated"))
    with pytest.raises(RpcCallError, match="terminated"):
        await daemon.call("chat.send", {"text": "Where is Lyon?", "session_id": session})
    said = await messages(daemon, session)
    assert [(m["role"], m["content"]) for m in said] == [
        ("user", "Where is Lyon?"),
        ("assistant", "Lyon is in "),
    ]
    assert said[1]["meta"]["failed"] is True
    fake.script(Reply("Lyon is in France."))  # the next turn goes on from it
    await daemon.call("chat.send", {"text": "Go on", "session_id": session})
    assert [m["content"] for m in await messages(daemon, session)][-1] == "Lyon is in France."


async def test_a_reply_sent_as_one_huge_piece_keeps_what_fits(daemon: Daemon, fake) -> None:
    """A server that ignores the reply cap sent it in one line: the cut kept nothing of it."""

    def line(content: str, done: bool) -> bytes:
        message = {"role": "assistant", "content": content}
        return json.dumps({"model": "llama3.2", "message": message, "done": done}).encode()

    # As a server that ignores num_predict sends it (the fake otherwise keeps the cap).
    fake.script(Reply(raw=line("x" * 400_000, False) + b"\n" + line("", True) + b"\n"))
    sent = await daemon.call("chat.send", {"text": "Say a lot"})
    room = fake.bodies()[-1]["options"]["num_predict"] * MAX_CHARS_PER_TOKEN
    assert sent["cut"] and len(sent["reply"]) == room
    [_, reply] = await messages(daemon, sent["session_id"])
    assert reply["content"] == "x" * room and reply["meta"]["cut"] is True


async def test_an_incognito_reply_cut_short_keeps_what_came(daemon: Daemon, fake) -> None:
    session = (await daemon.call("sessions.create", {"incognito": True}))["id"]
    fake.script(Reply(chunks=["Secret ", "plans "], error="llama runner process has terminated"))
    with pytest.raises(RpcCallError):
        await daemon.call("chat.send", {"text": "Tell me", "session_id": session})
    kept = await daemon.call("sessions.keep", {"id": session})
    said = await messages(daemon, kept["id"])
    assert [m["content"] for m in said] == ["Tell me", "Secret plans "]
