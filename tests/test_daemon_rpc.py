"""The daemon's socket RPC layer: wire format, errors, limits, permissions, client."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from navi_desktop.daemon import rpc
from navi_desktop.daemon.client import (
    DaemonClient,
    DaemonUnavailable,
    RpcCallError,
    call_sync,
)
from navi_desktop.daemon.params import expose
from navi_desktop.daemon.rpc import Peer, RpcServer, allowed, peer_uid
from navi_desktop.errors import InvalidInput, NaviError, NotFound

MAX_FRAME = 64 * 1024


class State:
    def __init__(self) -> None:
        self.stream_started = asyncio.Event()
        self.stream_cancelled = asyncio.Event()


@pytest.fixture
def state() -> State:
    return State()


def make_handlers(state: State) -> dict[str, rpc.Handler]:
    async def echo(params: dict[str, Any], peer: Peer) -> Any:
        return params

    async def slow(params: dict[str, Any], peer: Peer) -> Any:
        await asyncio.sleep(params.get("delay", 0.05))
        return {"slept": True}

    async def bad_input(params: dict[str, Any], peer: Peer) -> Any:
        raise InvalidInput("'limit' must be a positive integer, got -3")

    async def missing(params: dict[str, Any], peer: Peer) -> Any:
        raise NotFound("no session 'abc123'")

    async def navi_error(params: dict[str, Any], peer: Peer) -> Any:
        raise NaviError("Ollama is not reachable at http://127.0.0.1:11434")

    async def crash(params: dict[str, Any], peer: Peer) -> Any:
        raise RuntimeError("boom")

    async def takes_name(params: dict[str, Any], peer: Peer) -> Any:
        async def impl(*, name: str) -> str:
            return name

        return await impl(**params)

    async def stream(params: dict[str, Any], peer: Peer) -> Any:
        state.stream_started.set()
        try:
            i = 0
            while True:  # ignores notify()'s result on purpose: cancellation must end it
                await peer.notify("chat.delta", {"i": i, "text": "x" * 1000})
                i += 1
                await asyncio.sleep(0.001)
        except asyncio.CancelledError:
            state.stream_cancelled.set()
            raise

    @expose
    async def greet(*, name: str, times: int = 1, peer: Peer) -> str:
        return f"hello {name} from peer {peer.id}" * times

    return {
        "test.echo": echo,
        "test.slow": slow,
        "test.bad_input": bad_input,
        "test.missing": missing,
        "test.navi_error": navi_error,
        "test.crash": crash,
        "test.takes_name": takes_name,
        "test.stream": stream,
        "test.greet": greet,
    }


@pytest.fixture
async def server(sock_path: Path, state: State) -> AsyncIterator[RpcServer]:
    srv = RpcServer(sock_path, make_handlers(state), max_frame=MAX_FRAME)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


class Raw:
    """A bare socket client speaking the wire format directly."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, path: Path) -> Raw:
        reader, writer = await asyncio.open_unix_connection(os.fspath(path), limit=2**24)
        return cls(reader, writer)

    async def send(self, data: bytes | dict[str, Any]) -> None:
        if isinstance(data, dict):
            data = json.dumps(data).encode() + b"\n"
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self) -> dict[str, Any]:
        line = await asyncio.wait_for(self.reader.readline(), 2)
        assert line, "connection closed"
        return json.loads(line)

    async def request(self, method: str, params: Any = None, rid: Any = 1) -> dict[str, Any]:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        await self.send(msg)
        return await self.recv()

    async def at_eof(self) -> bool:
        return await asyncio.wait_for(self.reader.read(), 2) == b""

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def eventually(predicate: Any, timeout: float = 2.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


# -- wire format -------------------------------------------------------------------


async def test_ping_and_handler_result(server: RpcServer, sock_path: Path) -> None:
    raw = await Raw.open(sock_path)
    assert await raw.request("rpc.ping") == {"jsonrpc": "2.0", "id": 1, "result": {"pong": True}}
    reply = await raw.request("test.echo", {"a": [1, "é"]}, rid="abc")
    assert reply == {"jsonrpc": "2.0", "id": "abc", "result": {"a": [1, "é"]}}
    await raw.close()


async def test_handler_errors_map_to_codes(server: RpcServer, sock_path: Path) -> None:
    raw = await Raw.open(sock_path)
    err = (await raw.request("test.bad_input"))["error"]
    assert err == {
        "code": -32602,
        "message": "'limit' must be a positive integer, got -3",
        "data": {"kind": "InvalidInput"},
    }
    err = (await raw.request("test.missing"))["error"]
    assert (err["code"], err["message"], err["data"]["kind"]) == (
        -32001,
        "no session 'abc123'",
        "NotFound",
    )
    err = (await raw.request("test.navi_error"))["error"]
    assert err["code"] == -32000 and err["data"]["kind"] == "NaviError"
    assert "Ollama is not reachable" in err["message"]
    # A TypeError inside a handler is its bug, not the caller's parameters: logged.
    err = (await raw.request("test.takes_name", {"nmae": "x"}))["error"]
    assert err["code"] == -32603 and "nmae" not in err["message"]
    # The connection and server keep working after each error.
    assert (await raw.request("test.takes_name", {"name": "x"}))["result"] == "x"
    await raw.close()


async def test_internal_error_is_logged_and_server_keeps_serving(
    server: RpcServer, sock_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = await Raw.open(sock_path)
    err = (await raw.request("test.crash"))["error"]
    assert err["code"] == -32603
    assert "test.crash" in err["message"] and "boom" not in err["message"]
    assert any("boom" in (r.exc_text or "") for r in caplog.records)
    assert (await raw.request("rpc.ping"))["result"] == {"pong": True}
    await raw.close()


async def test_unknown_method_is_named(server: RpcServer, sock_path: Path) -> None:
    raw = await Raw.open(sock_path)
    reply = await raw.request("sessions.lsit", rid=7)
    assert reply["id"] == 7
    assert reply["error"]["code"] == -32601
    assert "'sessions.lsit'" in reply["error"]["message"]
    await raw.close()


async def test_invalid_json_then_next_line_works(server: RpcServer, sock_path: Path) -> None:
    raw = await Raw.open(sock_path)
    await raw.send(b'{"jsonrpc": "2.0", "id": 1, "method": \n')
    reply = await raw.recv()
    assert reply["id"] is None and reply["error"]["code"] == -32700
    assert "invalid JSON" in reply["error"]["message"]
    assert "column" in reply["error"]["message"]
    await raw.send(b"\xff\xfe\n")
    assert (await raw.recv())["error"]["code"] == -32700
    assert (await raw.request("rpc.ping", rid=2))["result"] == {"pong": True}
    await raw.close()


@pytest.mark.parametrize(
    ("frame", "needle", "rid"),
    [
        ([1, 2], "batch", None),
        ("hello", "expected a JSON object, got string", None),
        ({"jsonrpc": "2.0", "id": 3}, "missing 'method'", 3),
        ({"jsonrpc": "2.0", "id": 3, "method": 5}, "'method' must be", 3),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "rpc.ping"}, "'id' must be", None),
        ({"jsonrpc": "2.0", "id": [1], "method": "rpc.ping"}, "'id' must be", None),
        ({"jsonrpc": "2.0", "id": True, "method": "rpc.ping"}, "'id' must be", None),
        ({"jsonrpc": "2.0", "id": 4, "method": "test.echo", "params": [1]}, "'params'", 4),
        ({"jsonrpc": "1.0", "id": 4, "method": "rpc.ping"}, "'jsonrpc'", 4),
    ],
)
async def test_invalid_requests(
    server: RpcServer, sock_path: Path, frame: Any, needle: str, rid: Any
) -> None:
    raw = await Raw.open(sock_path)
    await raw.send(json.dumps(frame).encode() + b"\n")
    reply = await raw.recv()
    assert reply["error"]["code"] == -32600
    assert needle in reply["error"]["message"]
    assert reply["id"] == rid
    assert (await raw.request("rpc.ping"))["result"] == {"pong": True}
    await raw.close()


async def test_client_notifications_get_no_reply(server: RpcServer, sock_path: Path) -> None:
    raw = await Raw.open(sock_path)
    await raw.send({"jsonrpc": "2.0", "method": "test.echo", "params": {"x": 1}})
    await raw.send({"jsonrpc": "2.0", "method": "test.crash"})
    assert (await raw.request("rpc.ping", rid=9))["id"] == 9
    await raw.close()


# -- limits and misbehaving clients ---------------------------------------------------


async def test_oversized_frame_is_refused_and_closed(server: RpcServer, sock_path: Path) -> None:
    other = await Raw.open(sock_path)
    raw = await Raw.open(sock_path)
    big = b'{"jsonrpc":"2.0","id":1,"method":"test.echo","params":{"s":"' + b"x" * (MAX_FRAME * 3)
    raw.writer.write(big)  # no newline: the server must not wait for one
    reply = await raw.recv()
    assert reply["error"]["code"] == -32600
    assert "request too large" in reply["error"]["message"]
    assert f"limit {MAX_FRAME}" in reply["error"]["message"]
    assert await raw.at_eof()
    # Others are unaffected; a new client is served.
    assert (await other.request("rpc.ping"))["result"] == {"pong": True}
    fresh = await Raw.open(sock_path)
    assert (await fresh.request("rpc.ping"))["result"] == {"pong": True}
    for c in (raw, other, fresh):
        await c.close()


async def test_frame_at_limit_is_accepted(server: RpcServer, sock_path: Path) -> None:
    raw = await Raw.open(sock_path)
    head = b'{"jsonrpc":"2.0","id":1,"method":"test.echo","params":{"s":"'
    tail = b'"}}'
    body = head + b"y" * (MAX_FRAME - len(head) - len(tail)) + tail
    assert len(body) == MAX_FRAME
    await raw.send(body + b"\n")
    reply = await raw.recv()
    assert len(reply["result"]["s"]) == MAX_FRAME - len(head) - len(tail)
    await raw.close()


async def test_half_closed_connection_gets_its_response(server: RpcServer, sock_path: Path) -> None:
    raw = await Raw.open(sock_path)
    await raw.send({"jsonrpc": "2.0", "id": 1, "method": "test.slow", "params": {"delay": 0.05}})
    # The last frame may also lack its newline.
    raw.writer.write(b'{"jsonrpc":"2.0","id":2,"method":"rpc.ping"}')
    raw.writer.write_eof()
    replies = [await raw.recv(), await raw.recv()]
    assert {r["id"]: r["result"] for r in replies} == {1: {"slept": True}, 2: {"pong": True}}
    assert await raw.at_eof()
    await eventually(lambda: server.peer_count == 0 and server.in_flight == 0)
    await raw.close()


async def test_client_vanishing_mid_stream(
    server: RpcServer, sock_path: Path, state: State
) -> None:
    raw = await Raw.open(sock_path)
    await raw.send({"jsonrpc": "2.0", "id": 1, "method": "test.stream"})
    first = await raw.recv()
    assert first["method"] == "chat.delta" and "id" not in first
    await raw.recv()
    assert server.in_flight == 1
    raw.writer.transport.abort()  # vanish: no goodbye, unread data dropped
    await asyncio.wait_for(state.stream_cancelled.wait(), 2)
    await eventually(lambda: server.in_flight == 0 and server.peer_count == 0)
    client = await DaemonClient.connect(sock_path)
    async with client:
        assert await client.call("rpc.ping") == {"pong": True}


async def test_slow_request_does_not_block_the_connection(
    server: RpcServer, sock_path: Path
) -> None:
    async with await DaemonClient.connect(sock_path) as client:
        slow = asyncio.create_task(client.call("test.slow", {"delay": 0.5}))
        await asyncio.sleep(0.01)
        assert await asyncio.wait_for(client.call("rpc.ping"), 0.3) == {"pong": True}
        assert not slow.done()
        assert await slow == {"slept": True}


async def test_concurrent_clients_are_never_mixed_up(server: RpcServer, sock_path: Path) -> None:
    async def one_client(c: int) -> None:
        async with await DaemonClient.connect(sock_path) as client:
            payloads = [{"client": c, "n": n, "pad": f"{c}-{n}" * (n % 7)} for n in range(50)]
            results = await asyncio.gather(*(client.call("test.echo", p) for p in payloads))
            assert results == payloads

    await asyncio.gather(*(one_client(c) for c in range(20)))
    await eventually(lambda: server.in_flight == 0 and server.peer_count == 0)


async def test_stop_closes_connections_and_cancels_requests(
    sock_path: Path, state: State, caplog: pytest.LogCaptureFixture
) -> None:
    server = RpcServer(sock_path, make_handlers(state))
    await server.start()
    client = await DaemonClient.connect(sock_path)
    call = asyncio.create_task(client.call("test.stream"))
    await asyncio.wait_for(state.stream_started.wait(), 2)
    await server.stop()
    assert state.stream_cancelled.is_set()
    assert server.in_flight == 0 and server.peer_count == 0
    assert not sock_path.exists()
    with pytest.raises(DaemonUnavailable, match="closed the connection"):
        await asyncio.wait_for(call, 2)
    await client.close()
    await asyncio.sleep(0.01)
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


# -- subscriptions --------------------------------------------------------------------


async def test_broadcast_reaches_only_subscribers(server: RpcServer, sock_path: Path) -> None:
    memory = await DaemonClient.connect(sock_path)
    everything = await DaemonClient.connect(sock_path)
    nobody = await DaemonClient.connect(sock_path)
    assert await memory.subscribe("memory", "settings") == ["memory", "settings"]
    assert await memory.unsubscribe("settings") == ["memory"]
    await everything.subscribe("*")
    await nobody.call("rpc.ping")
    assert server.peer_count == 3

    sent = await server.broadcast("memory", "memory.changed", {"ids": [1, 2]})
    assert sent == 2
    assert await server.broadcast("session", "session.state", {"state": "ended"}) == 1

    async def first(client: DaemonClient) -> Any:
        return await asyncio.wait_for(anext(aiter(client.notifications())), 2)

    got = await first(memory)
    assert (got.method, got.params) == ("memory.changed", {"ids": [1, 2]})
    assert (await first(everything)).method == "memory.changed"
    assert (await first(everything)).method == "session.state"
    assert memory._notifications.empty() and nobody._notifications.empty()

    await nobody.close()
    await memory.close()
    await eventually(lambda: server.peer_count == 1)
    assert await server.broadcast("memory", "memory.changed") == 1
    await everything.close()


async def test_subscribe_rejects_bad_topics(server: RpcServer, sock_path: Path) -> None:
    async with await DaemonClient.connect(sock_path) as client:
        with pytest.raises(InvalidInput, match="topics"):
            await client.call("rpc.subscribe", {"topics": "memory"})


async def test_notify_after_close_is_a_noop(server: RpcServer, sock_path: Path) -> None:
    raw = await Raw.open(sock_path)
    await raw.request("rpc.ping")
    (peer,) = server.peers
    await raw.close()
    await eventually(lambda: server.peer_count == 0)
    assert await peer.notify("x.y", {"a": 1}) is False
    assert peer.closed


# -- permissions ----------------------------------------------------------------------


async def test_socket_and_folder_permissions(server: RpcServer, sock_path: Path) -> None:
    assert stat.S_ISSOCK(sock_path.stat().st_mode)
    assert stat.S_IMODE(sock_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(sock_path.parent.stat().st_mode) == 0o700


def test_peer_uid_and_policy() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        assert peer_uid(a) == os.getuid()
    assert allowed(os.getuid())
    assert not allowed(os.getuid() + 1)
    assert not allowed(None)


async def test_mismatched_uid_is_refused(
    server: RpcServer, sock_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rpc, "expected_uid", lambda: os.getuid() + 1)
    raw = await Raw.open(sock_path)
    reply = await raw.recv()
    assert reply["id"] is None
    assert reply["error"]["code"] == rpc.ACCESS_DENIED
    assert "access denied" in reply["error"]["message"]
    assert await raw.at_eof()
    assert server.peer_count == 0
    await raw.close()
    client = await DaemonClient.connect(sock_path)
    with pytest.raises(RpcCallError, match="access denied"):
        await client.call("rpc.ping", timeout=2)
    await client.close()


async def test_stale_socket_is_replaced_and_live_one_refused(sock_path: Path, state: State) -> None:
    sock_path.parent.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(os.fspath(sock_path))
    stale.close()  # leaves the file, nothing listening
    async with RpcServer(sock_path, make_handlers(state)):
        with pytest.raises(NaviError, match="already listening"):
            await RpcServer(sock_path, {}).start()
        async with await DaemonClient.connect(sock_path) as client:
            assert await client.call("rpc.ping") == {"pong": True}


# -- client ---------------------------------------------------------------------------


async def test_client_error_mapping(server: RpcServer, sock_path: Path) -> None:
    async with await DaemonClient.connect(sock_path) as client:
        with pytest.raises(InvalidInput, match="positive integer") as bad:
            await client.call("test.bad_input")
        assert isinstance(bad.value, RpcCallError)
        assert (bad.value.code, bad.value.kind) == (-32602, "InvalidInput")
        with pytest.raises(NotFound, match="abc123") as missing:
            await client.call("test.missing")
        assert isinstance(missing.value, RpcCallError) and missing.value.code == -32001
        with pytest.raises(RpcCallError) as other:
            await client.call("test.navi_error")
        assert not isinstance(other.value, InvalidInput)
        assert (other.value.code, other.value.kind) == (-32000, "NaviError")
        with pytest.raises(RpcCallError, match="unknown method") as unknown:
            await client.call("nope")
        assert unknown.value.code == -32601
        # expose(): names and types checked, peer injected.
        assert (await client.call("test.greet", {"name": "ann"})).startswith("hello ann")
        with pytest.raises(InvalidInput, match=r"parameter 'times' must be an integer.*got string"):
            await client.call("test.greet", {"name": "ann", "times": "2"})
        with pytest.raises(InvalidInput, match="missing required parameter 'name'"):
            await client.call("test.greet", {})
        with pytest.raises(InvalidInput, match="unknown parameter 'nam'"):
            await client.call("test.greet", {"nam": "ann"})


async def test_client_timeout(server: RpcServer, sock_path: Path) -> None:
    async with await DaemonClient.connect(sock_path) as client:
        with pytest.raises(DaemonUnavailable, match=r"did not answer test\.slow"):
            await client.call("test.slow", {"delay": 1}, timeout=0.05)
        assert await client.call("rpc.ping") == {"pong": True}


async def test_daemon_unavailable_missing_socket(sock_path: Path) -> None:
    with pytest.raises(DaemonUnavailable, match="does not exist") as exc:
        await DaemonClient.connect(sock_path)
    assert str(sock_path) in str(exc.value)


async def test_daemon_unavailable_stale_socket(sock_path: Path) -> None:
    sock_path.parent.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(os.fspath(sock_path))
    stale.close()
    with pytest.raises(DaemonUnavailable, match="no Navi daemon is listening") as exc:
        await DaemonClient.connect(sock_path)
    assert str(sock_path) in str(exc.value)


async def test_pending_calls_fail_when_daemon_goes_away(server: RpcServer, sock_path: Path) -> None:
    client = await DaemonClient.connect(sock_path)
    pending = asyncio.create_task(client.call("test.slow", {"delay": 5}))
    await eventually(lambda: server.in_flight == 1)
    await server.stop()
    with pytest.raises(DaemonUnavailable, match="the daemon closed the connection"):
        await asyncio.wait_for(pending, 2)
    with pytest.raises(DaemonUnavailable):
        await client.call("rpc.ping")
    items = [n async for n in client.notifications()]
    assert items == []
    await client.close()


async def call_sync_in_thread(path: Path, method: str, params: dict[str, Any]) -> Any:
    return await asyncio.to_thread(call_sync, path, method, params, 2.0)


async def test_call_sync(server: RpcServer, sock_path: Path) -> None:
    assert await call_sync_in_thread(sock_path, "test.echo", {"k": "v"}) == {"k": "v"}
    with pytest.raises(NotFound):
        await call_sync_in_thread(sock_path, "test.missing", {})
    with pytest.raises(RuntimeError, match="event loop"):
        call_sync(sock_path, "rpc.ping")
