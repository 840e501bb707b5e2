"""Text from a model or a file printed by the CLI drives no terminal: a session end's report
(what it dropped and why), the daemon's status (its last failure) and an export printed at a
terminal. Before, each wrote the model's escape sequences as they came: a clear screen, a
window title, a clipboard write (OSC 52)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pytest

from tests.daemon_home import navi_home
from tests.pipeline_helpers import extraction, fact

EVIL = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1b]0;PWN\x07\u202e"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_session_end_and_the_status_print_no_escapes() -> None:
    with navi_home() as h:
        said = h.navi("chat", "I like green tea.")
        assert said.returncode == 0, said.stderr
        # A candidate the write policy drops quotes the model's key; the reason names it.
        h.fake.script(extraction([fact(f"fav{EVIL}", "tea", f"quote{EVIL} not said")]))
        ended = h.navi("end", "--all")
        assert "dropped 1 of 1" in ended.stdout, ended.stdout + ended.stderr
        assert "fav?]52;c;" in ended.stdout
        h.navi("chat", "More tea.")
        h.fake.script(extraction([{"subject": 7, "key": f"k{EVIL}", "value": "x"}]))
        failed = h.navi("end", "--all")  # nothing usable: the reason quotes it
        status = h.navi("daemon", "status")  # and its last failure repeats it
        assert "k?]52;c;" in failed.stdout and "k?]52;c;" in status.stdout, failed.stdout
        for out in (ended.stdout, failed.stdout, status.stdout):
            assert not any(c in out for c in "\x1b\x07\u202e"), out


def test_an_export_printed_at_a_terminal_has_no_escapes(cli, home, capsys, monkeypatch) -> None:
    from navi_desktop.cli.main import run

    assert cli("add", "note", f"tea {EVIL}")[0] == 0
    for fmt in ("markdown", "json"):
        with monkeypatch.context() as m:
            m.setattr(sys, "stdout", Terminal())
            assert run(["memory", "--profile", "alice", "export", "--format", fmt]) == 0
            shown = sys.stdout.getvalue()
        assert not any(c in shown for c in "\x1b\x07\u202e"), shown
        assert "tea ?]52;c;" in shown or fmt == "json"  # JSON writes its own \u001b
    code, out, _ = cli("export", "--format", "json")  # to a file or a pipe: as it is
    assert code == 0 and json.loads(out)["memories"][0]["value"] == f"tea {EVIL}"


def test_an_export_with_standard_output_closed_says_so(home) -> None:
    done = subprocess.run(
        ["sh", "-c", f"{sys.executable} -m navi_desktop memory export >&-"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == (
        "navi: standard output is closed: write the export to a file (-o FILE)"
    )


@pytest.mark.parametrize("args", [["list", "--json"], ["list"], ["stats"]])
def test_any_command_with_standard_output_closed_says_so(cli, home, args) -> None:
    """Only the export knew: `list --json` ended in a traceback, and `list` printed nothing
    and exited 0."""
    assert cli("add", "note", "likes tea")[0] == 0
    done = subprocess.run(
        ["sh", "-c", f"{sys.executable} -m navi_desktop memory {' '.join(args)} >&-"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == (
        "navi: cannot write the output: standard output is closed; it is cut short: run it"
        " with its output open (not `>&-`)"
    )


def test_a_long_session_end_says_it_is_still_learning(monkeypatch, capsys) -> None:
    """`navi end` waited in silence for as long as the model took (minutes, for a model
    server that never answers)."""
    from navi_desktop.cli.main import run
    from tests.fake_ollama import Reply

    monkeypatch.setattr("navi_desktop.daemon.client.SLOW_AFTER_S", 0.3)
    with navi_home() as h:
        assert h.navi("chat", "I like green tea.").returncode == 0
        for name, value in h.environ.items():
            monkeypatch.setenv(name, value)
        h.fake.script(Reply(extraction([]).content, delay=1.5))  # a slow extraction
        capsys.readouterr()
        assert run(["end", "--all"]) == 0
        said = capsys.readouterr().err
        assert said.count("still learning from the session") == 1, said


REPLY = "one two three four five six seven eight"


def _interrupted(h: Any, *args: str) -> str:
    """`navi chat` stopped with Ctrl+C while its reply streams: the one line it printed."""
    import signal

    from tests.fake_ollama import Reply
    from tests.test_cli_chat_cancelled import read_until

    h.fake.script(Reply(REPLY, delay=1.0))  # 8 s in all: the Ctrl+C comes long before its end
    chat = h.popen("chat", *args, "count slowly")
    read_until(chat, b"one")  # it streams
    chat.send_signal(signal.SIGINT)
    _, err = chat.communicate(timeout=30)
    assert chat.returncode == 130, err
    [line] = err.strip().splitlines()
    return line


def test_ctrl_c_during_a_reply_says_what_is_kept_and_where() -> None:
    """It printed "^C" alone: no session, no word of the reply the daemon keeps; and the
    daemon stops the reply there, keeping what came (not the whole reply)."""
    import time

    with navi_home() as h:
        h.start()
        line = _interrupted(h)
        assert line.startswith("navi: stopped (Ctrl+C): what came of the reply is kept in session")
        session = line.rsplit(" ", 1)[-1]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the daemon saves it as it stops the reply
            shown = json.loads(h.navi("sessions", "show", session, "--json").stdout)
            if shown["messages"][-1]["role"] == "assistant":
                break
            time.sleep(0.1)
        last = shown["messages"][-1]
        assert last["content"].startswith("one") and last["content"].strip() != REPLY, last
        assert last["meta"]["cancelled"] is True, last


@pytest.mark.parametrize("continued", [False, True])
def test_ctrl_c_during_an_incognito_reply_claims_nothing_was_kept(continued: bool) -> None:
    """It said "what came of the reply is kept in session …" of a chat that keeps nothing,
    with --incognito or in an incognito session continued by its id alone."""
    with navi_home() as h:
        h.start()
        args = ["--incognito"]
        if continued:
            first = h.navi("chat", "--incognito", "--json", "hello")
            args = ["--session", json.loads(first.stdout)["session_id"]]
        line = _interrupted(h, *args)
        assert line.startswith("navi: stopped (Ctrl+C): nothing of this chat is saved"), line
        assert "kept" not in line and "incognito session incognito-" in line, line
        assert json.loads(h.navi("sessions", "list", "--json").stdout) == []
