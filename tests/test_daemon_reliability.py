"""Reliability of the daemon as a process: a real ``navi daemon`` subprocess on a real Unix
socket, the fake Ollama on loopback (in a thread of the test process), a throw-away NAVI_HOME.

Crash in the middle of a reply, many concurrent clients, hostile and broken clients, socket
permissions, incognito leaving no trace on disk, and a stop while a session is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from navi_desktop.daemon.client import DaemonClient, RemoteInvalidInput, RemoteNotFound, call_sync
from navi_desktop.memory.store import MemoryStore
from navi_desktop.paths import Paths
from tests.fake_ollama import Reply, ThreadedFakeOllama
from tests.pipeline_helpers import MODELS, extraction, fact, profile

PROFILE = "tester"
CONFIG = f'[ollama]\nchat_model = "llama3.2"\n[memory]\nembedder = "none"\nprofile = "{PROFILE}"\n'


def slow_reply(chunks: int = 300, delay: float = 0.02) -> Reply:
    """A reply that streams for ``chunks * delay`` seconds (long enough to interrupt)."""
    return Reply(chunks=[f"part{i} " for i in range(chunks)], delay=delay)


def wait_until(predicate: Any, timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:\tZ") for line in f)
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


class Env:
    """One NAVI_HOME, its environment for subprocesses, and the fake Ollama."""

    def __init__(self, root: Path, fake: ThreadedFakeOllama) -> None:
        self.fake = fake
        self.home = root / "h"
        (self.home / "config").mkdir(parents=True)
        self.config = self.home / "config" / "config.toml"
        self.config.write_text(CONFIG)
        self.environ = {**os.environ, "NAVI_HOME": str(self.home), "OLLAMA_HOST": fake.url}
        self.paths = Paths.from_env(self.environ)
        self.socket = self.paths.runtime / "daemon.sock"
        self.lock = self.paths.runtime / "daemon.lock"
        self.log = self.paths.state / "daemon.log"
        self.db = self.paths.profile_db(PROFILE)

    def navi(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "navi_desktop", *args],
            env=self.environ,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "navi_desktop", *args],
            env=self.environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def start(self) -> int:
        started = self.navi("daemon", "start")
        assert started.returncode == 0, started.stderr
        return self.pid()

    def pid(self) -> int:
        return int(self.lock.read_text().strip())

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return call_sync(self.socket, method, params or {}, timeout=10.0)

    def chat(self, *args: str) -> str:
        """One complete ``navi chat`` turn; returns the session id."""
        done = self.navi("chat", *args)
        assert done.returncode == 0, done.stderr
        return done.stderr.strip().split()[-1]

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r.body for r in self.fake.requests if r.path == "/api/chat"]

    def extraction_requests(self) -> list[dict[str, Any]]:
        return [b for b in self.chat_requests() if b.get("format")]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture
def env():
    # A short root: a Unix socket path is limited to ~107 bytes.
    root = Path(tempfile.mkdtemp(prefix="navi-rel-"))
    fake = ThreadedFakeOllama(MODELS).start()
    e = Env(root, fake)
    try:
        yield e
    finally:
        pid = int(e.lock.read_text() or 0) if e.lock.exists() else 0
        e.navi("daemon", "stop")
        if pid and alive(pid):  # a test that failed half-way must not leave a daemon behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)


def first_output(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> bytes:
    """Block until the process has written something to stdout; returns those bytes."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no output from `navi chat` in time"
    data = os.read(proc.stdout.fileno(), 65536)
    assert data, proc.stderr.read() if proc.stderr else ""
    return data


def read_session(db: Path, session_id: str) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
    """The session's state and (role, content, meta) messages, read straight from the file."""

    async def run() -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
        store = await MemoryStore.open(db, create=False)
        try:
            session = await store.get_session(session_id)
            messages = await store.messages(session_id)
            return session.state, [(m.role, m.content, m.meta or {}) for m in messages]
        finally:
            await store.close()

    return asyncio.run(run())


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# -- 1. kill -9 in the middle of a streamed reply ----------------------------------------------


def test_kill_9_mid_reply_keeps_messages_and_recovery_ends_the_session(env):
    pid = env.start()
    env.fake.script(Reply("Bees are wonderful."))
    sid = env.chat("I keep bees in my garden.")
    env.fake.script(slow_reply())
    chat = env.popen("chat", "--session", sid, "My hives are on the roof.")
    try:
        assert b"part0" in first_output(chat)  # the reply is streaming: the message was taken
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not alive(pid), 10, "the daemon to die")
        _, err = chat.communicate(timeout=15)
    finally:
        if chat.poll() is None:
            chat.kill()
    assert chat.returncode != 0
    assert b"Traceback" not in err and b"daemon" in err  # one line saying the daemon went away
    assert env.socket.exists()  # the crash left a stale socket behind

    state, messages = read_session(env.db, sid)
    assert state == "open"
    said = [(role, text) for role, text, _ in messages]
    assert ("user", "I keep bees in my garden.") in said
    assert ("assistant", "Bees are wonderful.") in said
    assert ("user", "My hives are on the roof.") in said  # acknowledged, then the crash

    env.fake.script(
        extraction(
            [fact("hive location", "on the roof", "My hives are on the roof.", category="profile")],
            summary="The user keeps bees on the roof.",
        ),
        profile("The user keeps bees."),
    )
    new_pid = env.start()  # replaces the stale socket; recovery ends the crashed session
    assert new_pid != pid
    wait_until(
        lambda: env.call("sessions.show", {"id": sid})["state"] == "ended",
        10,
        "recovery to end the crashed session",
    )
    requests = env.extraction_requests()
    assert any("My hives are on the roof." in json.dumps(body) for body in requests)
    memories = json.loads(
        env.navi("memory", "list", "--profile", PROFILE, "--json", "--status", "all").stdout
    )
    assert any(m["value"] == "on the roof" and m["session_id"] == sid for m in memories["memories"])
    assert "Traceback" not in env.log_text()


# -- 2. concurrent clients ---------------------------------------------------------------------

CLIENTS, PER_CLIENT, SESSIONS = 20, 50, 30


async def test_20_clients_x_50_requests_all_answered_none_mixed_up(env):
    pid = env.start()
    sock = env.socket
    async with await DaemonClient.connect(sock) as setup:
        ids = [
            (await setup.call("sessions.create", {"title": f"title {i}"}))["id"]
            for i in range(SESSIONS)
        ]
        # warm every path once, so lazily opened files do not count as leaks below
        await setup.call("sessions.list", {"limit": 5})
        await setup.call("sessions.show", {"id": ids[0]})
        await setup.call("daemon.status")  # opens the connection to Ollama
    await asyncio.sleep(0.2)
    fds_before = fd_count(pid)
    answered: list[tuple[int, int]] = []

    async def one(client: DaemonClient, k: int, j: int) -> None:
        n = k * PER_CLIENT + j
        kind = n % 5
        if kind == 0:
            assert await client.call("rpc.ping") == {"pong": True}
        elif kind == 1:
            limit = 1 + n % SESSIONS
            listed = await client.call("sessions.list", {"limit": limit})
            assert len(listed) == limit and {s["id"] for s in listed} <= set(ids)
        elif kind == 2:
            i = n % SESSIONS
            shown = await client.call("sessions.show", {"id": ids[i]})
            assert (shown["id"], shown["title"], shown["messages"]) == (ids[i], f"title {i}", [])
        elif kind == 3:
            missing = f"missing-{k}-{j}"
            with pytest.raises(RemoteNotFound) as exc:
                await client.call("sessions.show", {"id": missing})
            assert missing in exc.value.message  # the error belongs to this very request
        else:
            with pytest.raises(RemoteInvalidInput) as bad:
                await client.call("sessions.list", {"limit": 1000 + n})
            assert "limit" in bad.value.message
        answered.append((k, j))

    async def client_run(k: int) -> None:
        async with await DaemonClient.connect(sock) as client:
            # all 50 in flight at once on one connection: replies come back in any order
            await asyncio.wait_for(
                asyncio.gather(*(one(client, k, j) for j in range(PER_CLIENT))), 30
            )

    await asyncio.gather(*(client_run(k) for k in range(CLIENTS)))
    assert sorted(answered) == [(k, j) for k in range(CLIENTS) for j in range(PER_CLIENT)]

    async with await DaemonClient.connect(sock) as after:
        status = await after.call("daemon.status", timeout=10)
    assert status["pid"] == pid and status["ollama"]["reachable"]
    # every connection was closed on the daemon's side too: no leaked sockets
    deadline = time.monotonic() + 5
    while fd_count(pid) > fds_before and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert fd_count(pid) <= fds_before
    assert "Traceback" not in env.log_text()


# -- 3. hostile and broken clients ------------------------------------------------------------


class Raw:
    """A bare socket to the daemon that sends bytes and reads newline-delimited JSON."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(os.fspath(path))
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, rid: Any, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self.send(json.dumps(message).encode() + b"\n")

    def read(self) -> dict[str, Any] | None:
        """The next frame, or None at EOF."""
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def reply(self) -> dict[str, Any]:
        """The next response (skipping notifications)."""
        while True:
            msg = self.read()
            assert msg is not None, "the daemon closed the connection"
            if "id" in msg:
                return msg

    def close(self) -> None:
        self.sock.close()


def test_malformed_oversized_half_closed_and_vanishing_clients(env):
    env.start()
    bystander = Raw(env.socket)  # another client, connected throughout

    # bad frames on one connection: each answered with an error naming the problem
    bad = Raw(env.socket)
    bad.send(b"{not json\n")
    err = bad.reply()["error"]
    assert err["code"] == -32700 and "invalid JSON" in err["message"]
    bad.send(b"\xff\xfe\xfd\n")
    assert "not UTF-8" in bad.reply()["error"]["message"]
    bad.send(b"[1, 2]\n")
    assert "batch" in bad.reply()["error"]["message"]
    bad.send(b'{"jsonrpc": "2.0", "id": {"x": 1}, "method": "rpc.ping"}\n')
    assert "'id'" in bad.reply()["error"]["message"]
    bad.request(4, "no.such.method")
    reply = bad.reply()
    assert reply["id"] == 4 and reply["error"]["code"] == -32601
    bad.request(5, "sessions.list", {"limit": "ten"})
    reply = bad.reply()
    assert reply["id"] == 5 and reply["error"]["code"] == -32602
    bad.request(6, "sessions.list", [1, 2])
    assert bad.reply()["error"]["code"] == -32600
    bad.request(7, "rpc.ping", {"padding": "x" * (1024 * 1024)})  # big but under the limit
    assert bad.reply() == {"jsonrpc": "2.0", "id": 7, "result": {"pong": True}}
    bad.request("still-here", "rpc.ping")
    assert bad.reply()["result"] == {"pong": True}
    bad.close()

    # a frame over the 8 MiB limit: the client can send all of it and read the one error
    # naming the problem, then the daemon hangs up on that client only
    big = Raw(env.socket)
    big.send(b'{"jsonrpc": "2.0", "id": 1, "method": "rpc.ping", "params": {"p": "')
    big.send(b"x" * (20 * 1024 * 1024))
    frame = big.read()
    assert frame is not None and frame["error"]["data"]["kind"] == "FrameTooLarge"
    assert "request too large" in frame["error"]["message"]
    assert big.read() is None
    big.close()

    # half-closed: requests then EOF still get their answers, a last frame without newline too
    half = Raw(env.socket)
    half.request(1, "rpc.ping")
    half.request(2, "sessions.list", {"limit": 3})
    half.send(b'{"jsonrpc": "2.0", "id": 3, "method": "rpc.ping"}')  # no newline
    half.sock.shutdown(socket.SHUT_WR)
    got = {}
    while (msg := half.read()) is not None:
        got[msg["id"]] = msg
    assert set(got) == {1, 2, 3} and all("result" in m for m in got.values())
    half.close()

    # clients that connect and leave, or leave half-way through a frame
    Raw(env.socket).close()
    cut = Raw(env.socket)
    cut.send(b'{"jsonrpc": "2.0", "id": 1, "meth')
    cut.close()

    # a client vanishing while its reply streams
    env.fake.script(slow_reply())
    gone = Raw(env.socket)
    gone.request(1, "chat.send", {"text": "Remember my locker code is 4711."})
    note = gone.read()
    assert note is not None and note["method"] == "chat.delta"
    sid = note["params"]["session_id"]
    gone.close()
    # the daemon notices, stops the Ollama stream (no reply left running), keeps the message
    wait_until(lambda: env.fake.fake.disconnects >= 1, 10, "the Ollama stream to be cancelled")
    shown = wait_until(
        lambda: (
            (s := env.call("sessions.show", {"id": sid}))["messages"][-1]["role"] == "assistant"
            and s
        ),
        10,
        "the interrupted turn to be stored",
    )
    roles = [(m["role"], m["content"]) for m in shown["messages"]]
    assert roles[0] == ("user", "Remember my locker code is 4711.")
    assert shown["messages"][-1]["meta"].get("cancelled") is True
    # the session is free again: nothing of the interrupted turn is still running
    env.fake.script(Reply("Got it."))
    result = env.call("chat.send", {"session_id": sid, "text": "Still there?"})
    assert result["reply"] == "Got it." and not result["cancelled"]

    bystander.request("b", "daemon.status")
    assert bystander.reply()["result"]["ollama"]["reachable"]
    bystander.close()
    assert env.call("rpc.ping") == {"pong": True}
    assert "Traceback" not in env.log_text()


# -- 4. permissions ---------------------------------------------------------------------------


def test_socket_and_folders_are_private(env):
    env.start()
    env.chat("hello")  # creates the profile file

    def mode(path: Path) -> int:
        return stat.S_IMODE(os.stat(path).st_mode)

    st = os.stat(env.socket)
    assert stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid()
    assert mode(env.socket) == 0o600
    assert mode(env.paths.runtime) == 0o700
    assert mode(env.lock) == 0o600
    assert mode(env.paths.state) == 0o700
    assert mode(env.db.parent) == 0o700
    assert mode(env.db) == 0o600


# -- 5. incognito leaves no trace -------------------------------------------------------------


def test_incognito_conversation_and_end_all_leave_the_files_byte_identical(env):
    # incognito sessions may read memory here: the read path must not write either
    env.config.write_text(CONFIG + "[incognito]\nread_memory = true\n")
    env.start()
    env.fake.script(Reply("Tea it is."))
    env.chat("I drink green tea every morning.")
    env.fake.script(
        extraction(
            [fact("morning drink", "green tea", "I drink green tea every morning.")],
            summary="The user drinks green tea.",
        ),
        profile("The user drinks green tea."),
    )
    ended = env.navi("end", "--all")
    assert ended.returncode == 0, ended.stderr
    wal = env.db.with_name("memory.db-wal")

    def snapshot() -> list[bytes | None]:
        return [p.read_bytes() if p.exists() else None for p in (env.db, wal)]

    before = wait_until(
        lambda: (a := snapshot()) == (time.sleep(0.2) or snapshot()) and a,
        10,
        "the profile file to settle",
    )
    env.fake.script(Reply("Your secret is safe."), Reply("Still safe."))
    first = env.navi("chat", "--incognito", "My secret plan is to learn the tuba.")
    assert first.returncode == 0 and "Your secret is safe." in first.stdout
    label, incognito_id = first.stderr.strip().split("\n")[-1].rsplit(" ", 1)
    assert label == "incognito session"
    second = env.navi("chat", "--session", incognito_id, "And what about green tea?")
    assert second.returncode == 0 and "Still safe." in second.stdout
    assert "incognito session" in second.stderr
    # the second turn saw the first (the transcript lives in the daemon's memory)
    assert "learn the tuba" in json.dumps(env.chat_requests()[-1])
    end_all = env.navi("end", "--all", "--json")
    assert end_all.returncode == 0 and json.loads(end_all.stdout) == []
    time.sleep(0.3)
    assert snapshot() == before
    # and the incognito session is gone for good
    gone = env.navi("chat", "--session", incognito_id, "hello?")
    assert gone.returncode == 2


# -- 6. stop while a session is open ----------------------------------------------------------


def test_daemon_stop_mid_reply_ends_the_open_session_with_memories(env):
    env.start()
    env.fake.script(
        slow_reply(),
        extraction(
            [fact("allergy", "peanuts", "I am allergic to peanuts.", category="health")],
            summary="The user is allergic to peanuts.",
        ),
        profile("The user is allergic to peanuts."),
    )
    chat = env.popen("chat", "I am allergic to peanuts.")
    try:
        head = first_output(chat)
        stop = env.navi("daemon", "stop")
        out, err = chat.communicate(timeout=30)
    finally:
        if chat.poll() is None:
            chat.kill()
    assert stop.returncode == 0 and "stopped" in stop.stdout
    # the client got the part of the reply that streamed, and its session id
    # and says that the reply was stopped, failing (before: exit 0 and no word)
    assert chat.returncode == 1 and (head + out).startswith(b"part0 part1")
    assert b"Traceback" not in err
    listing = env.navi("memory", "list", "--profile", PROFILE, "--json", "--status", "all")
    memories = json.loads(listing.stdout)["memories"]
    peanuts = [m for m in memories if m["value"] == "peanuts"]
    assert len(peanuts) == 1
    sid = peanuts[0]["session_id"]
    assert err.decode().splitlines() == [
        "navi: the reply was stopped before its end (what came is kept in the session)",
        f"session {sid}",
    ]
    state, messages = read_session(env.db, sid)
    assert state == "ended"
    assert messages[0][:2] == ("user", "I am allergic to peanuts.")
    assert messages[1][0] == "assistant" and messages[1][2].get("cancelled") is True
    # the extraction read the conversation, including the part of the reply that streamed
    (request,) = env.extraction_requests()[:1]
    assert "allergic to peanuts" in json.dumps(request)
    assert "Traceback" not in env.log_text()
