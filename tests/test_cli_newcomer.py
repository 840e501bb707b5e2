"""What a newcomer types at the shell gets one plain line: an id too large for any memory, an
empty chat message, and an ``OLLAMA_HOST`` that the already running daemon does not use."""

from __future__ import annotations

from navi_desktop.ollama_host import host_note
from tests.test_daemon_e2e import env, navi, start_daemon  # noqa: F401 (the fixture)


def one_plain_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "internal error" not in stderr and "Traceback" not in stderr
    return lines[0]


def test_an_id_too_large_for_any_memory(env):  # noqa: F811
    _, environ, _ = env
    shown = navi(environ, "memory", "show", "99999999999999999999999")
    assert shown.returncode != 0
    line = one_plain_line(shown.stderr)
    assert "99999999999999999999999" in line and "Overflow" not in line


def test_an_empty_chat_message(env):  # noqa: F811
    _, environ, _ = env
    sent = navi(environ, "chat", "  ")
    assert sent.returncode == 2
    line = one_plain_line(sent.stderr)
    assert "empty" in line and "'text'" not in line


def test_an_ollama_host_the_daemon_does_not_use_is_named(env):  # noqa: F811
    fake, environ, _ = env
    start_daemon(environ)  # started with OLLAMA_HOST = the fake
    other = {**environ, "OLLAMA_HOST": "http://127.0.0.1:11435"}
    chat = navi(other, "chat", "hello")
    assert chat.returncode == 0, chat.stderr
    notes = [line for line in chat.stderr.splitlines() if "OLLAMA_HOST" in line]
    assert len(notes) == 1
    assert "http://127.0.0.1:11435 is not used" in notes[0] and fake.url in notes[0]
    assert "navi daemon stop" in notes[0]
    same = navi(environ, "chat", "hello again")  # the daemon's own host: nothing to say
    assert "OLLAMA_HOST" not in same.stderr


def test_the_note_names_config_toml_when_it_sets_the_host():
    reply = {"settings": {"ollama": {"host": "http://10.0.0.5:11434"}}, "unset": {}}
    note = host_note(reply, {"OLLAMA_HOST": "127.0.0.1:11435"})
    assert note is not None and "http://10.0.0.5:11434" in note and "config.toml sets it" in note
    assert host_note(reply, {"OLLAMA_HOST": "10.0.0.5"}) is None  # the same host, written short
    assert host_note(reply, {}) is None


async def test_the_hand_run_fake_fills_the_inbox(tmp_path):
    """`python tests/fake_ollama.py` is how a person tries Navi here: "my doctor said ..."
    must give the review inbox something to show."""
    from tests.fake_ollama import FakeOllama, _echo
    from tests.pipeline_helpers import MODELS
    from tests.tui_support import Daemon, make_home

    async with FakeOllama(MODELS, default_reply=_echo(0.0)) as fake:
        daemon = await Daemon(make_home(tmp_path, fake.url)).start()
        try:
            session = await daemon.call("sessions.create")
            said = "My doctor said I should walk every day. My favourite tea is sencha."
            await daemon.call("chat.send", {"session_id": session["id"], "text": said})
            await daemon.call("sessions.end", {"id": session["id"]})
            listed = await daemon.call("memory.list", {"kwargs": {"status": "held"}})
        finally:
            await daemon.stop()
    held = [(m["category"], m["value"]) for m in listed["memories"]]
    assert held == [("health", "I should walk every day")]
