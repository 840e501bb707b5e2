"""`navi chat` whose standard output cannot be written (`navi chat > /dev/full`, a full disk):
the reply is lost on the way out, but the daemon keeps the turn. Before, the one line said
only that the output was cut short, and the session line never came: the user could not find
what was kept. Now that line names the session and the command that shows it, as Ctrl+C's
does, and the exit status is 1.

A real daemon and the fake Ollama, the real CLI as a subprocess writing to /dev/full.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.daemon_home import navi_home, navi_into, one_line
from tests.fake_ollama import Reply

REPLY = "Lisbon is lovely in spring"
FULL = "navi: cannot write the output: disk full; it is cut short, "
FIX = ": free some space, or send it to another disk"


@pytest.mark.parametrize(
    "options",
    [[], ["--json"], ["--profile", "work"]],
    ids=["streamed", "json", "profile"],
)
def test_a_chat_whose_output_is_lost_names_the_session_that_keeps_it(options: list[str]) -> None:
    with navi_home() as h:
        h.fake.script(Reply(chunks=[f"{word} " for word in REPLY.split()]))
        line = one_line(navi_into(Path("/dev/full"), h.environ, "chat", *options, "travel?"))
        found = re.fullmatch(
            re.escape(FULL)
            + r"and the conversation is kept in session (\w+) \(see it: `(.+)`\)"
            + re.escape(FIX),
            line,
        )
        assert found, line
        session, show = found.groups()
        profile = options if options[:1] == ["--profile"] else []
        assert show == " ".join(["navi", "sessions", "show", session, *profile])
        shown = h.navi(*show.split()[1:])  # what the line says to run shows the whole turn
        assert shown.returncode == 0, shown.stderr
        assert "travel?" in shown.stdout and f"assistant: {REPLY}" in shown.stdout


def test_an_incognito_chat_whose_output_is_lost_claims_nothing_was_kept() -> None:
    with navi_home() as h:
        line = one_line(navi_into(Path("/dev/full"), h.environ, "chat", "--incognito", "hi"))
        assert re.fullmatch(
            re.escape(FULL)
            + r"and the incognito conversation is not saved \(session incognito-\w+\)"
            + re.escape(FIX),
            line,
        ), line
        assert h.navi("sessions", "list").stdout == ""


def test_a_model_that_fails_mid_reply_is_said_even_when_the_output_is_lost(tmp_path) -> None:
    """The reply's own failure (said when the output goes to a file) was replaced by the
    output's: the user learnt of a full disk and never of the model that failed."""
    with navi_home() as h:
        lines = {}
        for out in (tmp_path / "reply.txt", Path("/dev/full")):
            h.fake.script(
                Reply(chunks=["Lisbon ", "is ", "lovely "], error="model ran out of memory")
            )
            lines[out.name] = one_line(navi_into(out, h.environ, "chat", "travel?"))
        assert "model ran out of memory" in lines["reply.txt"], lines
        assert "model ran out of memory" in lines["full"], lines
        assert "disk full" not in lines["full"], lines


def test_a_chat_whose_output_is_lost_stops_its_turn_and_keeps_what_came() -> None:
    """A failed write did not end the wait: the turn ran to its end for nobody (10 minutes
    for a model that never ends). Now it goes on a moment, then stops, keeping what came."""
    import json
    import time

    words = [f"w{i} " for i in range(40)]
    with navi_home() as h:
        h.fake.script(Reply(chunks=words, delay=0.5))  # 20 s in all
        line = one_line(navi_into(Path("/dev/full"), h.environ, "chat", "count"))
        session = re.search(r"kept in session (\w+)", line)
        assert session, line
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the daemon saves it as it stops the reply
            shown = json.loads(h.navi("sessions", "show", session[1], "--json").stdout)
            if shown["messages"][-1]["role"] == "assistant":
                break
            time.sleep(0.1)
        reply = shown["messages"][-1]
        assert reply["role"] == "assistant" and reply["meta"]["cancelled"] is True, reply
        assert reply["content"].startswith("w0") and "w39" not in reply["content"], reply
