"""Forgetting as a user meets it: facts learned from real conversations through a real daemon
(the fake Ollama repeating values, saving them with a tool, searching for them), then forgot or
rejected, then every byte of every file under NAVI_HOME searched for the value."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from navi_desktop.daemon.client import DaemonClient
from navi_desktop.daemon.main import socket_path
from navi_desktop.paths import Paths
from tests.daemon_home import navi
from tests.fake_ollama import FakeOllama, Reply, ThreadedFakeOllama, remembering_model
from tests.pipeline_helpers import MODELS
from tests.tui_support import Daemon, make_home

SECRET = "Zorblax4471"
DENTIST = "Dr Quillfeather"


def occurrences(home: Path, text: str) -> dict[str, int]:
    """Every regular file under ``home`` that holds ``text`` (any case), with the count."""
    needle = text.lower().encode()
    found = {}
    for path in sorted(home.rglob("*")):
        if not stat.S_ISREG(path.lstat().st_mode):
            continue  # the daemon's socket
        count = path.read_bytes().lower().count(needle)
        if count:
            found[str(path.relative_to(home))] = count
    return found


@pytest.fixture
def env(tmp_path):
    fake = ThreadedFakeOllama(MODELS, default_reply=remembering_model(("dentist",))).start()
    home = tmp_path / "h"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text(
        '[ollama]\nchat_model = "llama3.2"\n[memory]\nembedder = "none"\nprofile = "tester"\n'
    )
    environ = {**os.environ, "NAVI_HOME": str(home), "OLLAMA_HOST": fake.url}
    environ.pop("NAVI_DAEMON", None)
    yield environ, home, fake
    navi(environ, "daemon", "stop")
    fake.stop()


def chat(environ: dict[str, str], text: str) -> tuple[str, str]:
    """One message in a new session, which is then ended (learned from); (session, reply)."""
    said = navi(environ, "chat", text)
    assert said.returncode == 0, said.stderr
    session = said.stderr.strip().split()[-1]
    ended = navi(environ, "end", "--session", session)
    assert ended.returncode == 0 and "processed" in ended.stdout, ended.stdout + ended.stderr
    return session, said.stdout


def memories(environ: dict[str, str], *args: str) -> list[dict]:
    listed = navi(environ, "memory", "--json", "list", "--status", "all", "--limit", "500", *args)
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)["memories"]


def test_a_fact_learned_in_conversations_is_gone_from_every_file(env):
    environ, home, fake = env
    assert navi(environ, "daemon", "start").returncode == 0
    said = navi(environ, "chat", f"Hi! My locker code is {SECRET}.")
    assert SECRET in said.stdout  # the model repeats it
    session = said.stderr.strip().split()[-1]
    fake.script(Reply(f"{SECRET}, noted!"))  # an extraction answer that is not JSON
    failed = navi(environ, "end", "--session", session)
    assert "not processed yet" in failed.stdout  # the daemon logs why, quoting the model
    assert failed.returncode == 1  # a script sees it (it exited 0)
    assert SECRET in (home / "state" / "daemon.log").read_text()
    assert "processed" in navi(environ, "end", "--session", session).stdout
    _, second = chat(environ, f"Please remember that my locker code is {SECRET}.")
    assert f"Saved: your locker code is {SECRET}" in second  # through memory_save
    # A restart between sessions: the file is reopened (and its planner statistics taken).
    assert navi(environ, "daemon", "stop").returncode == 0
    _, third = chat(environ, "What is my locker code?")
    assert f"Your locker code is {SECRET}" in third  # through memory_search
    [fact] = [m for m in memories(environ, "--kind", "fact") if m["value"] == SECRET]
    summaries = [m["value"] for m in memories(environ, "--kind", "episode")]
    assert sum(SECRET in s for s in summaries) == 3
    before = occurrences(home, SECRET)
    assert sum(before.values()) >= 10, before  # messages, tool calls, summaries, indexes...

    shown = navi(environ, "memory", "forget", str(fact["id"]))  # stdin is not a terminal
    assert shown.returncode == 2 and "--yes to forget memory" in shown.stderr
    assert "messages in 3 sessions" in shown.stdout and "3 session summaries" in shown.stdout
    assert "the profile summary" in shown.stdout and f"{SECRET}»" in shown.stdout
    assert memories(environ, "--kind", "fact")  # the preview changed nothing

    forgot = navi(environ, "memory", "forget", str(fact["id"]), "--yes")
    assert forgot.returncode == 0, forgot.stderr
    assert "Removed from" in forgot.stdout and "3 session summaries" in forgot.stdout
    searched = navi(
        environ, "memory", "search", SECRET, "--kind", "message", "--kind", "episode", "--all"
    )
    assert searched.stdout.strip() == "No matches."
    exports = home / "exports"
    exports.mkdir()
    assert navi(environ, "memory", "export", "-o", str(exports / "memory.json")).returncode == 0
    assert (
        navi(
            environ, "memory", "export", "--format", "markdown", "-o", str(exports / "memory.md")
        ).returncode
        == 0
    )
    assert occurrences(home, SECRET) == {}  # the daemon still up

    # The redacted summaries are rewritten by the model after the forget.
    for _ in range(40):
        if not any("[forgotten]" in m["value"] for m in memories(environ, "--kind", "episode")):
            break
        time.sleep(0.25)
    assert not any("[forgotten]" in m["value"] for m in memories(environ, "--kind", "episode"))

    assert navi(environ, "daemon", "stop").returncode == 0
    assert occurrences(home, SECRET) == {}  # and after it stopped
    assert (home / "state" / "daemon.log").stat().st_size > 0  # the log was searched too


def test_a_rejected_candidate_leaves_no_copy(env):
    environ, home, _ = env
    assert navi(environ, "daemon", "start").returncode == 0
    chat(environ, f"By the way, my dentist is {DENTIST}.")
    [held] = memories(environ, "--status", "held")
    assert held["value"] == DENTIST
    # Not a fact yet: the session's summary does not state it.
    assert not any(DENTIST in m["value"] for m in memories(environ, "--kind", "episode"))

    async def reject() -> None:  # what the inspector's reject does
        async with await DaemonClient.connect(socket_path(Paths.from_env(environ))) as client:
            preview = await client.call(
                "memory.forget_preview", {"profile": "tester", "args": [held["id"]]}
            )
            assert any("message" in place for place in preview["everywhere"])
            await client.call("memory.forget", {"profile": "tester", "args": [held["id"]]})

    asyncio.run(reject())
    assert occurrences(home, "Quillfeather") == {}
    assert navi(environ, "daemon", "stop").returncode == 0
    assert occurrences(home, "Quillfeather") == {}


def test_tombstones_refuse_a_tool_call_and_an_import(env, tmp_path):
    environ, _, _ = env
    assert navi(environ, "daemon", "start").returncode == 0
    chat(environ, f"My locker code is {SECRET}.")
    [fact] = memories(environ, "--kind", "fact")
    exported = tmp_path / "before.json"  # the user's own file, from before the forget
    assert navi(environ, "memory", "export", "-o", str(exported)).returncode == 0
    assert navi(environ, "memory", "forget", str(fact["id"]), "--yes").returncode == 0

    _, reply = chat(environ, f"Please remember that my locker code is {SECRET}.")
    assert "I could not save it: not saved: the user made Navi forget this" in reply
    assert not [m for m in memories(environ) if SECRET in m["value"]]

    imported = navi(environ, "memory", "import", str(exported))
    assert imported.returncode == 0, imported.stderr
    assert "0 added" in imported.stdout and "blocked (forgotten before)" in imported.stdout
    assert not [m for m in memories(environ) if SECRET in m["value"]]
    assert navi(environ, "daemon", "stop").returncode == 0
    # The new session said it again (the user's own words stay), but no memory holds it.
    assert not [m for m in memories(environ) if SECRET in m["value"]]


def test_the_preview_names_the_session_it_was_learned_in_and_how_to_delete_it(env):
    """Through the running daemon: the CLI's preview names the conversation (its own words
    stay), the command it gives works, and the preview after it still does."""
    environ, _, _ = env
    assert navi(environ, "daemon", "start").returncode == 0
    session, _ = chat(environ, f"My locker code is {SECRET}.")
    [fact] = memories(environ, "--kind", "fact")

    def preview(*json_flag: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # stdin not a terminal: the preview only, nothing forgotten
            [sys.executable, "-m", "navi_desktop", "memory", *json_flag, "forget", str(fact["id"])],
            env=environ,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )

    shown = preview()
    assert shown.returncode == 2, shown.stderr
    [line] = [line for line in shown.stdout.splitlines() if line.startswith("Learned in ")]
    assert line.endswith(
        f": other wordings of it there stay. Delete the session to remove them:"
        f" navi sessions delete {session} --profile tester"
    )
    [kept] = json.loads(preview("--json").stdout)["preview"]["kept_sessions"]
    assert kept["id"] == session and kept["messages"] >= 2

    deleted = navi(environ, *line.rsplit(": ", 1)[1].split()[1:])  # the command as shown
    assert deleted.returncode == 0, deleted.stderr
    after = json.loads(preview("--json").stdout)["preview"]
    assert after["kept"] is None and after["kept_sessions"] == []


# -- a reader holding the file ------------------------------------------------------------------

# Another program: a process of its own (SQLite's locks are per process, so a connection in
# the test's process would not hold anything against the daemon's).
READER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN")
print(conn.execute("SELECT count(*) FROM memories").fetchone()[0], flush=True)
sys.stdin.readline()
conn.close()
"""


def _checkpoint(db: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sqlite3; sqlite3.connect({str(db)!r}).execute("
            "'PRAGMA wal_checkpoint(TRUNCATE)').fetchall()",
        ],
        check=True,
        timeout=30,
    )


async def test_a_reader_holding_the_file_delays_the_scrub_until_it_closes(tmp_path, monkeypatch):
    monkeypatch.setattr("navi_desktop.daemon.main.RETRY_CHECK_S", 0.2)
    async with FakeOllama(MODELS) as fake:
        paths = make_home(tmp_path, fake.url)
        daemon = await Daemon(paths).start()
        environ = {**os.environ, "NAVI_HOME": str(paths.config.parent)}
        try:
            added = await daemon.call("memory.add", {"args": [f"the vault opens with {SECRET}"]})
            memory_id = added["memory"]["id"]
            db = paths.profile_db("tester")
            for _ in range(30):  # other writes, so that the log has something to hold
                await daemon.call("memory.add", {"args": [f"filler fact {_}"]})
            await asyncio.to_thread(_checkpoint, db)  # the text is in the file itself
            # Another program opens the file and keeps a read transaction open.
            reader = subprocess.Popen(
                [sys.executable, "-c", READER, str(db)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert (await asyncio.to_thread(reader.stdout.readline)).strip() == "31"

            async with await DaemonClient.connect(socket_path(paths)) as client:
                await client.subscribe("memory")
                forgot = await asyncio.to_thread(
                    navi, environ, "memory", "--profile", "tester", "forget", str(memory_id), "-y"
                )
                assert forgot.returncode == 0, forgot.stderr
                assert "the memory file is being read, by Navi itself" in forgot.stdout
                stats = await asyncio.to_thread(
                    navi, environ, "memory", "--profile", "tester", "stats"
                )
                assert f"Scrubbing   #{memory_id}: waiting since" in stats.stdout
                assert occurrences(paths.config.parent, SECRET)  # the reader's pages
                reader.communicate("done\n", timeout=10)  # it closes the file
                async with asyncio.timeout(20):
                    async for note in client.notifications():
                        if note.method == "memory.scrubbed":
                            break
            assert note.params == {"profile": "tester", "ids": [memory_id]}
            assert occurrences(paths.config.parent, SECRET) == {}
            stats = await daemon.call("memory.stats")
            assert stats["pending_scrubs"] == []
        finally:
            await daemon.stop()
        assert occurrences(paths.config.parent, SECRET) == {}


# -- incognito ----------------------------------------------------------------------------------


async def test_incognito_with_read_memory_creates_no_file_for_a_new_profile(tmp_path):
    async with FakeOllama(MODELS) as fake:
        paths = make_home(tmp_path, fake.url, "[incognito]\nread_memory = true\n")
        daemon = await Daemon(paths).start()
        try:
            reply = await daemon.call("chat.send", {"text": "hello there", "incognito": True})
            assert reply["incognito"] and reply["reply"]
            again = await daemon.call(
                "chat.send", {"text": "and again", "session_id": reply["session_id"]}
            )
            assert again["incognito"]
        finally:
            await daemon.stop()
    folder = paths.profile_db("tester").parent
    assert not folder.exists() or sorted(p.name for p in folder.iterdir()) == []
