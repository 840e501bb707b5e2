"""`navi chat` with the message piped in (`echo hi | navi chat`): before, standard input was
ignored and the user was told the message was empty."""

from __future__ import annotations

import subprocess
import sys

from tests.daemon_home import Home, navi_home


def chat(h: Home, data: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "navi_desktop", "chat", *args],
        input=data,
        env=h.environ,
        capture_output=True,
        timeout=60,
    )


def said(h: Home, done: subprocess.CompletedProcess[bytes]) -> str:
    """What the user said in the session the chat reported."""
    assert done.returncode == 0, done.stderr
    session = done.stderr.decode().split()[-1]
    shown = h.navi("sessions", "show", session)
    return shown.stdout.split("user: ", 1)[1].split("] assistant: ", 1)[0].rsplit("[", 1)[0].strip()


def test_a_piped_message_is_sent_and_bad_input_gets_one_line() -> None:
    with navi_home() as h:
        sent = chat(h, b"what is on my list today?\nand tomorrow?\n")
        assert said(h, sent) == "what is on my list today?\nand tomorrow?"
        assert said(h, chat(h, b"from a dash\n", "-")) == "from a dash"

        for data, words in [
            (b"", b"nothing to send"),
            (b"word " * 30_000, b"over 100,000 characters"),
            (b"\xff\xfe binary \x00", b"not UTF-8 text (byte 0)"),
        ]:
            refused = chat(h, data)
            assert refused.returncode == 2, refused.stderr
            lines = refused.stderr.decode().strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("navi: "), lines
            assert words.decode() in lines[0]

        # a message given as an argument wins over what is piped
        assert said(h, chat(h, b"the piped one\n", "the argument")) == "the argument"
