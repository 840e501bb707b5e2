"""The daemon as a user meets it: real processes, a real socket, the fake Ollama on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from navi_desktop.daemon.client import DaemonClient
from navi_desktop.daemon.main import socket_path
from navi_desktop.paths import Paths
from tests.daemon_home import navi
from tests.fake_ollama import Reply, ThreadedFakeOllama
from tests.pipeline_helpers import MODELS, extraction, fact, profile, rule


@pytest.fixture
def env(tmp_path):
    fake = ThreadedFakeOllama(MODELS).start()
    home = tmp_path / "h"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text(
        '# test settings\n[ollama]\nchat_model = "llama3.2"\n'
        '[memory]\nembedder = "none"\nprofile = "tester"\n'
    )
    environ = {**os.environ, "NAVI_HOME": str(home), "OLLAMA_HOST": fake.url}
    yield fake, environ, home
    subprocess.run(
        [sys.executable, "-m", "navi_desktop", "daemon", "stop"],
        env=environ,
        capture_output=True,
        timeout=60,
    )
    fake.stop()


def start_daemon(environ) -> Path:
    """``navi daemon start``; returns the socket it listens on."""
    started = navi(environ, "daemon", "start")
    assert started.returncode == 0, started.stderr
    return socket_path(Paths.from_env(environ))


def test_chat_then_stop_writes_memories(env):
    fake, environ, _ = env
    said = "I moved to Lisbon last year. Please always answer briefly."
    fake.script(
        Reply("Noted, Lisbon it is."),
        extraction(
            [fact("home city", "Lisbon", "I moved to Lisbon last year", category="profile")],
            [rule("Answer briefly", "always answer briefly")],
            summary="The user said they live in Lisbon.",
        ),
        profile("The user lives in Lisbon."),
    )
    chat = navi(environ, "chat", said)
    assert chat.returncode == 0, chat.stderr
    assert "Noted, Lisbon it is." in chat.stdout
    session_id = chat.stderr.strip().split()[-1]

    status = navi(environ, "daemon", "status", "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["running"] and data["ollama"]["reachable"] and data["open_sessions"] == 1

    stop = navi(environ, "daemon", "stop")
    assert stop.returncode == 0 and "stopped" in stop.stdout
    listing = navi(environ, "memory", "list", "--profile", "tester", "--json", "--status", "all")
    memories = json.loads(listing.stdout)["memories"]
    assert {m["kind"] for m in memories} == {"fact", "rule", "episode"}
    assert any(m["value"] == "Lisbon" and m["session_id"] == session_id for m in memories)
    # the extraction request saw the whole conversation
    bodies = [r.body for r in fake.requests if r.path == "/api/chat"]
    assert any(said in json.dumps(b) and b.get("format") for b in bodies)


def test_second_daemon_is_refused_and_incognito_leaves_no_trace(env):
    fake, environ, home = env
    start_daemon(environ)
    again = navi(environ, "daemon", "run", timeout=20)
    assert again.returncode == 75 and "already running" in again.stderr  # EX_TEMPFAIL
    navi(environ, "chat", "warm up")  # creates the profile file
    db = home / "data" / "profiles" / "tester" / "memory.db"
    time.sleep(0.2)

    def snapshot():
        return [p.read_bytes() if p.exists() else None for p in (db, db.with_name("memory.db-wal"))]

    before = snapshot()
    fake.script(Reply("secret reply"))
    chat = navi(environ, "chat", "--incognito", "my secret plan")
    assert chat.returncode == 0 and "secret reply" in chat.stdout
    assert "incognito session" in chat.stderr
    assert snapshot() == before
    # Written before the command, as for the app: it was ignored, and this chat was saved.
    fake.script(Reply("another secret reply"))
    chat = navi(environ, "--incognito", "chat", "my other secret plan")
    assert chat.returncode == 0 and "another secret reply" in chat.stdout
    assert "incognito session" in chat.stderr
    assert snapshot() == before


def test_memory_commands_go_through_the_running_daemon(env):
    _, environ, _ = env
    sock = start_daemon(environ)

    async def watch_and_add():
        async with await DaemonClient.connect(sock) as client:
            await client.subscribe("memory")
            add = await asyncio.to_thread(
                navi,
                environ,
                "memory",
                "add",
                "--profile",
                "tester",
                "--category",
                "preferences",
                "drink",
                "oolong tea",
            )
            assert add.returncode == 0, add.stderr
            notes = client.notifications()
            note = await asyncio.wait_for(notes.__anext__(), 5)
            return note

    note = asyncio.run(watch_and_add())
    assert note.method == "memory.changed" and note.params["method"] == "memory.add"
    listed = navi(environ, "memory", "--profile", "tester", "--json", "search", "tea")
    assert json.loads(listed.stdout)["hits"][0]["memory"]["value"] == "oolong tea"
    bad = navi(environ, "memory", "--profile", "tester", "show", "999")
    assert bad.returncode == 2 and "no memory with id 999" in bad.stderr


def test_settings_set_keeps_comments_and_broadcasts(env):
    _, environ, home = env
    sock = start_daemon(environ)

    async def change():
        async with await DaemonClient.connect(sock) as client:
            await client.subscribe("settings")
            result = await client.call("settings.set", {"changes": {"memory.budget_tokens": 500}})
            note = await asyncio.wait_for(client.notifications().__anext__(), 5)
            with pytest.raises(Exception, match="budget_tokens"):
                await client.call("settings.set", {"changes": {"memory.budget_tokens": "lots"}})
            return result, note

    result, note = asyncio.run(change())
    assert result["settings"]["memory"]["budget_tokens"] == 500
    assert note.method == "settings.changed" and "memory.budget_tokens" in note.params["changed"]
    text = (home / "config" / "config.toml").read_text()
    assert text.startswith("# test settings") and "budget_tokens = 500" in text


def test_memory_command_starts_the_daemon(env):
    _, environ, home = env
    environ = {k: v for k, v in environ.items() if k != "NAVI_DAEMON"}
    added = navi(environ, "memory", "add", "--profile", "tester", "editor", "helix")
    assert added.returncode == 0, added.stderr
    status = navi(environ, "daemon", "status", "--json")
    assert json.loads(status.stdout)["running"]
    corrupt = home / "data" / "profiles" / "broken" / "memory.db"
    corrupt.parent.mkdir(parents=True)
    corrupt.write_bytes(b"garbage" * 100)
    bad = navi(environ, "memory", "list", "--profile", "broken")
    assert bad.returncode == 2 and str(corrupt) in bad.stderr
    assert corrupt.read_bytes() == b"garbage" * 100


def test_a_lone_surrogate_from_the_model_becomes_a_replacement_character(env):
    """JSON lets a server send "\\ud800", which no frame, file or row can hold: the reply
    still completes and is stored, the character shown as U+FFFD (it was an internal error
    in chat.send, and the delta was lost)."""
    fake, environ, _ = env
    fake.script(Reply(chunks=["Hi ", "\ud800", " there"]))
    chat = navi(environ, "chat", "hello")
    assert chat.returncode == 0, chat.stderr
    assert "Hi \ufffd there" in chat.stdout
    session_id = chat.stderr.strip().split()[-1]
    shown = navi(environ, "sessions", "show", session_id)
    assert shown.returncode == 0, shown.stderr
    assert "assistant: Hi \ufffd there" in shown.stdout


def test_control_characters_from_the_model_or_a_title_never_reach_the_terminal(env):
    """A model that answers with escape sequences, or a session renamed to one, cannot move
    the cursor or retitle the terminal: each shows as '?'. An export to a file keeps the
    conversation as written."""
    fake, environ, _ = env
    fake.script(Reply("Hi \x1b[2Jthere\x07, \x1b]0;owned\x07done"))
    chat = navi(environ, "chat", "hello")
    assert chat.returncode == 0, chat.stderr
    assert "Hi ?[2Jthere?, ?]0;owned?done" in chat.stdout
    session_id = chat.stderr.strip().split()[-1]
    renamed = navi(environ, "sessions", "rename", session_id, "evil\x1b[31m\rtitle")
    listed = navi(environ, "sessions", "list")
    shown = navi(environ, "sessions", "show", session_id)
    for result in (chat, renamed, listed, shown):
        assert result.returncode == 0, result.stderr
        assert not {"\x1b", "\x07", "\r"} & set(result.stdout)
    assert "evil?[31m?title" in renamed.stdout and "evil?[31m?title" in listed.stdout
    assert "assistant: Hi ?[2Jthere?" in shown.stdout
    exported = navi(environ, "sessions", "export", session_id)  # stdout is a pipe here
    assert "Hi \x1b[2Jthere\x07" in exported.stdout


def test_a_look_at_a_profile_with_no_file_through_the_cli_makes_none(env):
    _, environ, home = env
    start_daemon(environ)
    folder = home / "data" / "profiles" / "typo"
    listed = navi(environ, "memory", "list", "--profile", "typo")
    assert listed.returncode == 0 and "No memories." in listed.stdout
    stats = navi(environ, "memory", "stats", "--profile", "typo")
    assert stats.returncode == 0, stats.stderr
    assert f"File        {folder / 'memory.db'} (none yet: made by the first memory" in stats.stdout
    assert navi(environ, "sessions", "list", "--profile", "typo").returncode == 0
    assert not folder.exists()


def test_the_empty_profile_is_made_afresh_and_never_through_a_link(env, tmp_path):
    # It holds nothing: one a killed daemon or another version left (here, damaged) failed
    # every look at a new profile with "run navi memory doctor", about a file of no profile.
    _, environ, home = env
    empty = home / "run" / "empty-profile"
    empty.mkdir(parents=True, mode=0o700)
    (empty / "memory.db").write_text("garbage left behind\n")
    listed = navi(environ, "memory", "list", "--profile", "typo")
    assert listed.returncode == 0 and "No memories." in listed.stdout, listed.stderr
    assert navi(environ, "daemon", "stop").returncode == 0
    assert not empty.exists()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    empty.symlink_to(elsewhere)
    listed = navi(environ, "memory", "list", "--profile", "typo")
    assert listed.returncode != 0
    [line] = listed.stderr.strip().splitlines()
    assert str(empty) in line and "symbolic link" in line
    assert list(elsewhere.iterdir()) == [] and empty.is_symlink()
