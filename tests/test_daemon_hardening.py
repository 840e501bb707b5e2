"""The socket server against hostile and broken peers: every frame answered, no client able
to stall another, bounded work and memory per client, clients that refuse bad replies.

A real ``RpcServer`` on a real Unix socket in this process (its limits set small), with
bare sockets as clients. Timeouts here only stop a hang from blocking the suite; nothing
asserts a speed (that is ``benchmarks/daemon_abuse.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from navi_desktop.daemon.client import DaemonClient, DaemonUnavailable
from navi_desktop.daemon.rpc import Limits, Peer, RpcServer
from navi_desktop.memory.embedders import MAX_QUERY_CHARS, OllamaEmbedder

HANG = 10.0  # seconds before a test calls a wait a hang


def make_handlers(server_box: list[RpcServer]) -> dict[str, Any]:
    async def echo(params: dict[str, Any], peer: Peer) -> Any:
        return params

    async def shout(params: dict[str, Any], peer: Peer) -> Any:
        """Like memory.add: broadcasts a change to every subscriber, then answers."""
        sent = await server_box[0].broadcast("memory", "memory.changed", {"pad": params["pad"]})
        return {"sent": sent}

    async def wait(params: dict[str, Any], peer: Peer) -> Any:
        await asyncio.sleep(params.get("s", 0.05))
        return {"waited": True}

    return {"test.echo": echo, "test.shout": shout, "test.wait": wait}


async def start_server(path: Path, **limits: Any) -> RpcServer:
    box: list[RpcServer] = []
    server = RpcServer(path, make_handlers(box), limits=Limits(**limits))
    box.append(server)
    await server.start()
    return server


@pytest.fixture
async def server(sock_path: Path) -> AsyncIterator[RpcServer]:
    srv = await start_server(sock_path, max_backlog=256 * 1024, write_timeout=60.0)
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture(autouse=True)
def no_tracebacks(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Whatever a client does, the log gets no traceback and no unretrieved task error."""
    caplog.set_level(logging.INFO)
    yield
    bad = [
        r.getMessage()
        for r in caplog.records
        if r.exc_info or "never retrieved" in r.getMessage() or r.levelno >= logging.ERROR
    ]
    assert bad == []


class Raw:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, path: Path) -> Raw:
        reader, writer = await asyncio.open_unix_connection(os.fspath(path), limit=2**24)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self) -> Any:
        import json

        line = await asyncio.wait_for(self.reader.readline(), HANG)
        assert line, "connection closed"
        return json.loads(line)

    async def at_eof(self) -> bool:
        return await asyncio.wait_for(self.reader.read(), HANG) == b""

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await asyncio.wait_for(self.writer.wait_closed(), HANG)


async def eventually(predicate: Any) -> None:
    async with asyncio.timeout(HANG):
        while not predicate():
            await asyncio.sleep(0.01)


# -- every frame gets a reply ---------------------------------------------------------


@pytest.mark.parametrize(
    ("frame", "code", "words"),
    [
        (b"[" * 100_000 + b"]" * 100_000, -32700, "nested deeper than"),
        (b'{"jsonrpc":"2.0","id":1,"method":"test.echo","params":{"a":' * 50_000, -32700, ""),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"rpc.ping","params":{"n":' + b"7" * 5000 + b"}}",
            -32700,
            "too many digits",
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"test.echo","params":{"n":1e999}}',
            -32700,
            "out of range",
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"test.echo","params":{"n":NaN}}',
            -32700,
            "NaN is not JSON",
        ),
        (b'{"jsonrpc":"2.0","id":"\\ud800","method":"rpc.ping"}', -32600, "'id'"),
        (
            b'{"jsonrpc":"2.0","id":2,"method":"' + b"m" * 1_000_000 + b'"}',
            -32601,
            "unknown method",
        ),
    ],
)
async def test_every_abusive_frame_gets_one_reply_and_the_connection_goes_on(
    server: RpcServer, sock_path: Path, frame: bytes, code: int, words: str
) -> None:
    raw = await Raw.open(sock_path)
    await raw.send(frame + b"\n")
    reply = await raw.recv()
    assert reply["error"]["code"] == code
    assert words in reply["error"]["message"]
    await raw.send(b'{"jsonrpc":"2.0","id":"after","method":"rpc.ping"}\n')
    assert (await raw.recv())["result"] == {"pong": True}
    await raw.close()


async def test_a_frame_nested_64_deep_is_still_served(server: RpcServer, sock_path: Path) -> None:
    value: Any = 1
    for _ in range(61):  # with the request and its params: 63 levels
        value = [value]
    async with await DaemonClient.connect(sock_path) as client:
        assert await client.call("test.echo", {"v": value}, timeout=HANG) == {"v": value}


# -- the client survives a daemon's bad frames ------------------------------------------


async def bad_daemon(path: Path, frame: bytes) -> asyncio.AbstractServer:
    """A listener of this user that answers any request with ``frame``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(frame + b"\n")
        await writer.drain()
        await reader.read()  # keep the connection open until the client leaves
        writer.close()

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return await asyncio.start_unix_server(serve, os.fspath(path))


@pytest.mark.parametrize(
    "frame",
    [
        b'{"jsonrpc":"2.0","id":1,"result":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"jsonrpc":"2.0","id":1,"result":' + b"9" * 5000 + b"}",
    ],
)
async def test_client_refuses_an_unreadable_reply_instead_of_waiting(
    sock_path: Path, frame: bytes
) -> None:
    listener = await bad_daemon(sock_path, frame)
    try:
        client = await DaemonClient.connect(sock_path)
        with pytest.raises(DaemonUnavailable, match="cannot read"):
            await asyncio.wait_for(client.call("rpc.ping"), HANG)
        assert client.closed
        await client.close()
    finally:
        listener.close()


# -- no client stalls another -----------------------------------------------------------


async def test_a_subscriber_that_stops_reading_is_dropped_not_awaited(
    server: RpcServer, sock_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stuck = await Raw.open(sock_path)
    await stuck.send(
        b'{"jsonrpc":"2.0","id":1,"method":"rpc.subscribe","params":{"topics":["*"]}}\n'
    )
    assert (await stuck.recv())["result"]["topics"] == ["*"]
    stuck.writer.transport.pause_reading()  # never reads again: the kernel's buffer, then
    # its queue in the daemon fill up
    pad = "x" * 64 * 1024
    async with await DaemonClient.connect(sock_path) as writer:
        for _ in range(200):  # 12.5 MiB of notifications for the stuck one
            await writer.call("test.shout", {"pad": pad}, timeout=HANG)
        assert server.peer_count == 1  # only the well-behaved client is left
    assert any("dropped" in r.getMessage() for r in caplog.records)
    await stuck.close()


async def test_pipelining_without_reading_is_held_back_per_connection(
    sock_path: Path,
) -> None:
    server = await start_server(sock_path, max_in_flight=8, max_unread=64 * 1024)
    try:
        flood = await Raw.open(sock_path)
        flood.writer.transport.pause_reading()  # reads no reply
        request = b'{"jsonrpc":"2.0","id":1,"method":"test.echo","params":{"p":"%s"}}\n' % (
            b"y" * 2000
        )
        # written without waiting: the client's own buffer holds what the daemon refuses
        flood.writer.write(request * 20_000)
        await asyncio.sleep(0.5)  # let the daemon take all it will take
        assert server.in_flight <= 8
        async with await DaemonClient.connect(sock_path) as other:
            assert await other.call("rpc.ping", timeout=HANG) == {"pong": True}
        flood.writer.transport.abort()  # leaves with everything unread
        await eventually(lambda: server.peer_count == 0 and server.in_flight == 0)
        async with await DaemonClient.connect(sock_path) as other:
            assert await other.call("rpc.ping", timeout=HANG) == {"pong": True}
    finally:
        await server.stop()


async def test_requests_in_flight_are_capped_and_the_rest_waits(sock_path: Path) -> None:
    server = await start_server(sock_path, max_in_flight=4)
    try:
        async with await DaemonClient.connect(sock_path) as client:
            calls = [
                asyncio.ensure_future(client.call("test.wait", {"s": 0.2}, timeout=HANG))
                for _ in range(12)
            ]
            await eventually(lambda: server.in_flight >= 4)  # never more than 4: checked next
            assert server.in_flight == 4
            assert await asyncio.gather(*calls) == [{"waited": True}] * 12
    finally:
        await server.stop()


async def test_connections_over_the_cap_get_one_error_line(sock_path: Path) -> None:
    server = await start_server(sock_path, max_connections=3)
    try:
        held = [await Raw.open(sock_path) for _ in range(3)]
        await eventually(lambda: server.peer_count == 3)
        extra = await Raw.open(sock_path)
        refused = await extra.recv()
        assert refused["error"]["data"]["kind"] == "TooManyConnections"
        assert "too many connections" in refused["error"]["message"]
        assert await extra.at_eof()
        await held[0].close()
        await eventually(lambda: server.peer_count == 2)
        async with await DaemonClient.connect(sock_path) as client:
            assert await client.call("rpc.ping", timeout=HANG) == {"pong": True}
        for raw in held[1:]:
            await raw.close()
    finally:
        await server.stop()


async def test_idle_connections_close_unless_subscribed(sock_path: Path) -> None:
    server = await start_server(sock_path, idle_timeout=0.3)
    try:
        listener = await DaemonClient.connect(sock_path)
        await listener.subscribe("memory")
        idle = await Raw.open(sock_path)
        closed = await idle.recv()
        assert closed["error"]["data"]["kind"] == "IdleTimeout"
        assert await idle.at_eof()
        await asyncio.sleep(0.6)  # twice the timeout: the subscriber is still there
        assert await listener.call("rpc.ping", timeout=HANG) == {"pong": True}
        await listener.close()
    finally:
        await server.stop()


# -- bounded work per request -------------------------------------------------------------


async def test_a_long_search_query_is_embedded_from_its_start_only() -> None:
    seen: list[str] = []

    async def embed(model: str, texts: list[str]) -> list[list[float]]:
        seen.extend(texts)
        return [[1.0, 0.0] for _ in texts]

    embedder = OllamaEmbedder("nomic-embed-text", embed)
    await embedder.embed(["q" * 20_000], query=True)
    assert len(seen[0]) == len("search_query: ") + MAX_QUERY_CHARS
