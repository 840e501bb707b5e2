"""The daemon's local socket server: newline-delimited JSON in the JSON-RPC 2.0 shape.

One Unix socket (folder 0700, socket 0600), peers checked by uid, no TCP. Each request
runs as its own task, so a streamed chat does not block a ping on the same connection;
each frame is written whole and frames never interleave. What one client may hold (requests
in flight, unread output, connections, idle time) is bounded: see ``connection.Limits``.

The seam for the daemon's methods is a plain mapping ``{"method.name": handler}`` where
a handler is ``async def handler(params: dict, peer: Peer) -> result``. Errors map to
codes by class: ``InvalidInput`` -> -32602, ``NotFound`` -> -32001, any other
``NaviError`` -> -32000 (message ``str(err)``, ``data.kind`` the class name); anything
unexpected -> -32603 with the traceback in the log. Parameters are checked against declared
models (``navi_desktop.daemon.params``) before a handler runs.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

from navi_desktop.daemon.connection import LINGER_S, Connection, Limits, Peer, error_frame
from navi_desktop.daemon.dispatch import Dispatcher, Handler
from navi_desktop.daemon.files import clear_socket_path
from navi_desktop.daemon.peercred import peer_uid
from navi_desktop.daemon.wire import ACCESS_DENIED, APP_ERROR, encode, envelope
from navi_desktop.errors import NaviError
from navi_desktop.paths import ensure_own_dir

log = logging.getLogger(__name__)

# The codes themselves are in ``wire``; ``ACCESS_DENIED`` is the one this module sends alone.
__all__ = [
    "ACCESS_DENIED",
    "Handler",
    "Limits",
    "Peer",
    "RpcServer",
    "allowed",
    "expected_uid",
    "peer_uid",
]

DEFAULT_MAX_FRAME = Limits.max_frame
# sockaddr_un.sun_path is 108 bytes on Linux (104 on macOS), NUL included.
MAX_SOCKET_PATH = 107 if sys.platform.startswith("linux") else 103
FD_RESERVE = 128  # file descriptors kept for databases, logs and Ollama beside the clients


def expected_uid() -> int:
    """The only uid allowed to talk to the daemon: the daemon's own."""
    return os.getuid()


def allowed(uid: int | None) -> bool:
    """Policy: same user only. Unknown credentials are refused (fail closed)."""
    return uid is not None and uid == expected_uid()


def _fd_limit(wanted: int) -> int:
    """Raise this process's open-file limit towards ``wanted`` when the system allows;
    returns the limit in force."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Unix
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return wanted
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft
    return target


# -- the server ----------------------------------------------------------------------


class RpcServer(Dispatcher):
    """Serves ``handlers`` on a Unix socket at ``socket_path``.

    ``await start()`` / ``await stop()`` or ``async with``. ``stop()`` closes every
    connection and cancels (and awaits) every in-flight request.
    """

    def __init__(
        self,
        socket_path: Path,
        handlers: dict[str, Handler],
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        limits: Limits | None = None,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.limits = limits or Limits(max_frame=max_frame)
        self._handlers: dict[str, Handler] = {
            "rpc.ping": self._ping,
            "rpc.subscribe": self._subscribe,
            "rpc.unsubscribe": self._unsubscribe,
        }
        for name, handler in handlers.items():
            self.register(name, handler)
        self._server: asyncio.AbstractServer | None = None
        self._socket_id: tuple[int, int] | None = None
        self._connections: set[Connection] = set()
        self._serving: set[asyncio.Task[Any]] = set()
        self._peer_ids = itertools.count(1)
        self._stopping = False
        self._max_connections = self.limits.max_connections
        self._sweeper: asyncio.Task[None] | None = None

    # registration and introspection

    def register(self, name: str, handler: Handler) -> None:
        """Add a method (the service may register after building the server)."""
        if name.startswith("rpc."):
            raise ValueError(f"method names starting with 'rpc.' are reserved: {name!r}")
        self._handlers[name] = handler

    @property
    def methods(self) -> list[str]:
        return sorted(self._handlers)

    @property
    def peers(self) -> tuple[Peer, ...]:
        return tuple(c.peer for c in self._connections if not c.closed)

    @property
    def peer_count(self) -> int:
        return len(self.peers)

    @property
    def in_flight(self) -> int:
        """Request tasks not yet finished, over every connection."""
        return sum(len(c.tasks) for c in self._connections)

    @property
    def serving(self) -> bool:
        return self._server is not None

    # lifecycle

    async def start(self) -> None:
        if self._server is not None:
            return
        path = self.socket_path
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            raise NaviError(
                f"socket path {path} is too long for a Unix socket "
                f"({len(os.fsencode(path))} bytes, limit {MAX_SOCKET_PATH}); "
                "set NAVI_HOME to a shorter folder"
            )
        ensure_own_dir(path.parent, "run folder")
        clear_socket_path(path)
        wanted = self.limits.max_connections + FD_RESERVE
        self._max_connections = max(
            1, min(self.limits.max_connections, _fd_limit(wanted) - FD_RESERVE)
        )
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old_umask = os.umask(0o177)
            try:
                sock.bind(os.fspath(path))
            finally:
                os.umask(old_umask)
            os.chmod(path, 0o600)
            st = os.stat(path)
            self._socket_id = (st.st_dev, st.st_ino)
            self._stopping = False
            self._server = await asyncio.start_unix_server(
                self._serve, sock=sock, limit=self.limits.max_frame, backlog=128
            )
        except BaseException:
            sock.close()
            self._unlink_own_socket()
            raise
        self._sweeper = asyncio.get_running_loop().create_task(self._close_idle())
        log.info("listening on %s", path)

    async def listen_again_if_lost(self) -> bool:
        """Listen at the path again when another program removed or replaced the socket
        file there (connections already open go on); True when it did. Raises what start()
        raises when the path is taken: another daemon's socket, a file planted there."""
        if self._server is None or self._stopping or self._socket_id is None:
            return False
        try:
            st = os.lstat(self.socket_path)
            if (st.st_dev, st.st_ino) == self._socket_id:
                return False
        except FileNotFoundError:
            pass
        old, self._server, self._socket_id = self._server, None, None  # not ours to remove
        old.close()  # stops accepting; the connections it made are the daemon's own
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        try:
            await self.start()
        except BaseException:
            self._server = old  # closed: stop() still ends its connections
            raise
        return True

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping = True
        server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in list(self._connections):  # each serving task then ends by itself
            conn.abort("the daemon is stopping", hard=True)
        if self._serving:
            _done, stuck = await asyncio.wait(set(self._serving), timeout=5.0)
            for task in stuck:
                task.cancel()
        while self._serving:
            await asyncio.gather(*list(self._serving), return_exceptions=True)
        if self._sweeper is not None:
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        try:
            async with asyncio.timeout(5):
                await server.wait_closed()
        except Exception:
            pass
        self._unlink_own_socket()
        log.info("stopped listening on %s", self.socket_path)

    async def __aenter__(self) -> RpcServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _unlink_own_socket(self) -> None:
        """Remove the socket file only if it is still the one this server bound."""
        if self._socket_id is None:
            return
        try:
            st = os.lstat(self.socket_path)
            if (st.st_dev, st.st_ino) == self._socket_id:
                os.unlink(self.socket_path)
        except OSError:
            pass
        self._socket_id = None

    # notifications

    async def broadcast(self, topic: str, method: str, params: Any = None) -> int:
        """Notify every peer subscribed to ``topic`` (or to ``"*"``). Never waits on a peer:
        each gets the frame queued, and one whose queue is full is dropped. Returns how many
        got it."""
        targets = [c for c in self._connections if not c.closed and c.peer.subscribed(topic)]
        if not targets:
            return 0
        data = encode(envelope(method, params))
        return sum(c.push(data) for c in targets)

    # connections

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._stopping:
            writer.transport.abort()
            return
        self._serving.add(task)
        uid = peer_uid(writer.get_extra_info("socket"))
        conn = Connection(reader, writer, uid, next(self._peer_ids), self.limits, self._handle)
        linger = None  # a refused client gets its one line, briefly
        try:
            if not allowed(uid):
                log.warning(
                    "refused a connection from uid %s (daemon runs as uid %s)", uid, expected_uid()
                )
                who = "unknown" if uid is None else str(uid)
                message = f"access denied: peer uid {who} is not the daemon's user"
                conn.reply(error_frame(None, ACCESS_DENIED, message, "AccessDenied"))
                linger = LINGER_S
                return
            if len(self._connections) >= self._max_connections:
                log.warning(
                    "refused a connection: %d clients connected (limit %d)",
                    len(self._connections),
                    self._max_connections,
                )
                message = (
                    f"the Navi daemon has too many connections ({self._max_connections});"
                    " close some clients and try again"
                )
                conn.reply(error_frame(None, APP_ERROR, message, "TooManyConnections"))
                linger = LINGER_S
                return
            self._connections.add(conn)
            await conn.serve()
        except asyncio.CancelledError:
            # stop() cancels us; end normally so asyncio's stream callback does not log it.
            if not self._stopping:
                raise
        finally:
            try:
                await conn.close(hard=self._stopping, linger=linger)
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
            finally:
                self._connections.discard(conn)
                self._serving.discard(task)

    async def _close_idle(self) -> None:
        """Close connections with nothing to do: no request for ``idle_timeout`` seconds,
        nothing running, no subscription (an app waiting for events is never idle)."""
        idle = self.limits.idle_timeout
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(max(idle / 4, 0.01), 30.0))
            now = loop.time()
            for conn in list(self._connections):
                if conn.closed or conn.busy or conn.peer.subscriptions:
                    continue
                if now - conn.last_active < idle:
                    continue
                log.info("peer %s: closed after %g s without a request", conn.peer.id, idle)
                message = f"closed after {idle:g} s without a request; connect again"
                conn.reply(error_frame(None, APP_ERROR, message, "IdleTimeout"))
                conn.abort("idle")

    # built-in methods

    async def _ping(self, params: dict[str, Any], peer: Peer) -> dict[str, Any]:
        return {"pong": True}

    async def _subscribe(self, params: dict[str, Any], peer: Peer) -> dict[str, Any]:
        peer.subscriptions.update(_topics(params))
        return {"topics": sorted(peer.subscriptions)}

    async def _unsubscribe(self, params: dict[str, Any], peer: Peer) -> dict[str, Any]:
        peer.subscriptions.difference_update(_topics(params))
        return {"topics": sorted(peer.subscriptions)}


def _topics(params: dict[str, Any]) -> list[str]:
    from navi_desktop.daemon.method_params import Topics
    from navi_desktop.daemon.params import parse

    return parse(Topics, params).topics
