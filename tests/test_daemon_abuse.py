"""A real daemon process under abuse: hostile frames, a subscriber that stops reading, a
client pipelining thousands of requests without reading, then vanishing. Well-behaved
clients are served throughout and the daemon's log stays free of tracebacks.

Timeouts here only stop a hang from blocking the suite (the figures are in
``benchmarks/daemon_abuse.py``); the daemon's own write timeout is 30 s, far above them."""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from navi_desktop.daemon.client import call_sync
from tests.daemon_home import Home, navi_home

HANG = 10.0


@pytest.fixture
def home() -> Iterator[Home]:
    with navi_home() as h:
        yield h


class Raw:
    """A bare blocking socket: sends bytes, reads one JSON frame at a time."""

    def __init__(self, path: Any) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(HANG)
        self.sock.connect(os.fspath(path))
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            assert chunk, "the daemon closed the connection"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def reset(self) -> None:
        """Leave at once, with everything unread (a crash, as the daemon sees it)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


def call(home: Home, method: str, params: dict[str, Any] | None = None) -> Any:
    return call_sync(home.socket, method, params or {}, timeout=HANG)


def add(home: Home, value: str) -> Any:
    return call(home, "memory.add", {"args": [value], "kwargs": {"category": "preferences"}})


def test_abuse_leaves_others_served_and_no_traceback_in_the_log(home: Home) -> None:
    home.start()

    # frames that once got no reply at all
    bad = Raw(home.socket)
    bad.send(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    assert bad.reply()["error"]["code"] == -32700
    bad.send(b'{"jsonrpc":"2.0","id":1,"method":"rpc.ping","params":{"n":' + b"1" * 5000 + b"}}\n")
    assert bad.reply()["error"]["code"] == -32700
    bad.send(b'{"jsonrpc":"2.0","id":"\\udc00","method":"rpc.ping"}\n')
    assert bad.reply()["error"]["code"] == -32600
    bad.send(b'{"jsonrpc":"2.0","id":2,"method":"rpc.ping"}\n')
    assert bad.reply()["result"] == {"pong": True}
    bad.reset()

    # a subscriber to everything asks for a large reply and never reads it
    for i in range(60):
        add(home, f"tea number {i} " + "x" * 4000)
    stuck = Raw(home.socket)
    stuck.send(b'{"jsonrpc":"2.0","id":1,"method":"rpc.subscribe","params":{"topics":["*"]}}\n')
    assert stuck.reply()["result"]["topics"] == ["*"]
    stuck.send(b'{"jsonrpc":"2.0","id":2,"method":"memory.export"}\n' * 20)  # MBs unread
    for i in range(20):  # each broadcasts memory.changed to the stuck subscriber too
        assert add(home, f"coffee number {i}")["memory"]["value"] == f"coffee number {i}"

    # a client pipelines pings without reading a reply, then vanishes
    flood = Raw(home.socket)
    flood.sock.setblocking(False)
    storm = b'{"jsonrpc":"2.0","id":1,"method":"rpc.ping"}\n' * 50_000
    sent = 0
    try:
        while sent < len(storm):
            sent += flood.sock.send(storm[sent : sent + 65536])
    except BlockingIOError:
        pass  # the daemon stopped reading it: backpressure
    assert call(home, "rpc.ping") == {"pong": True}
    flood.reset()
    stuck.reset()
    assert call(home, "rpc.ping") == {"pong": True}
    assert add(home, "after the storm")["memory"]["value"] == "after the storm"

    stopped = home.navi("daemon", "stop")
    assert stopped.returncode == 0, stopped.stderr
    log = home.log_text()
    assert "Traceback" not in log and "never retrieved" not in log, log[-4000:]
