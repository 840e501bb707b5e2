"""The daemon's local socket server: newline-delimited JSON in the JSON-RPC 2.0 shape.

One Unix socket (folder 0700, socket 0600), peers checked by uid, no TCP. Each request
runs as its own task, so a streamed chat does not block a ping on the same connection;
frames are written under a per-connection lock and never interleave.

The seam for the daemon's methods is a plain mapping ``{"method.name": handler}`` where
a handler is ``async def handler(params: dict, peer: Peer) -> result``. Errors map to
codes by class: ``InvalidInput`` -> -32602, ``NotFound`` -> -32001, any other
``NaviError`` -> -32000 (message ``str(err)``, ``data.kind`` the class name); anything
unexpected -> -32603 with the traceback in the log. :func:`expose` turns a function with
named, annotated parameters into a handler that checks the parameters first.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import inspect
import itertools
import json
import logging
import os
import re
import socket
import stat
import struct
import sys
import types
import typing
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from navi_desktop.daemon.wire import (
    ACCESS_DENIED,
    APP_ERROR,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    envelope,
)
from navi_desktop.daemon.wire import encode as _encode
from navi_desktop.errors import InvalidInput, NaviError, NotFound
from navi_desktop.paths import ensure_private_dir

log = logging.getLogger(__name__)

__all__ = [
    "ACCESS_DENIED",
    "APP_ERROR",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "Handler",
    "Peer",
    "RpcServer",
    "allowed",
    "expected_uid",
    "expose",
    "peer_uid",
]

DEFAULT_MAX_FRAME = 8 * 1024 * 1024
LINGER_S = 1.0  # how long a client whose frame was too large may go on sending
# sockaddr_un.sun_path is 108 bytes on Linux (104 on macOS), NUL included.
MAX_SOCKET_PATH = 107 if sys.platform.startswith("linux") else 103

Handler = Callable[[dict[str, Any], "Peer"], Awaitable[Any]]

_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


# -- peer credentials ----------------------------------------------------------------


def peer_uid(sock: Any) -> int | None:
    """The uid of the process at the other end of a connected Unix socket, or None.

    Linux: ``SO_PEERCRED`` (struct ucred: pid, uid, gid). macOS/BSD: ``socket.getpeereid``
    when Python has it, else ``LOCAL_PEERCRED`` (struct xucred: version, uid, ...).
    """
    try:
        so_peercred = getattr(socket, "SO_PEERCRED", None)
        if so_peercred is not None:
            size = struct.calcsize("3i")
            _pid, uid, _gid = struct.unpack(
                "3i", sock.getsockopt(socket.SOL_SOCKET, so_peercred, size)
            )
            return uid
        getpeereid = getattr(socket, "getpeereid", None)
        if getpeereid is not None:
            return int(getpeereid(sock.fileno())[0])
        if sys.platform == "darwin" or "bsd" in sys.platform:
            sol_local = getattr(socket, "SOL_LOCAL", 0)
            local_peercred = getattr(socket, "LOCAL_PEERCRED", 0x001)
            raw = sock.getsockopt(sol_local, local_peercred, 256)
            _version, uid = struct.unpack_from("=IIh", raw)[:2]
            return int(uid)
    except (OSError, struct.error, ValueError) as exc:
        log.warning("cannot read the peer's credentials: %s", exc)
    return None


def expected_uid() -> int:
    """The only uid allowed to talk to the daemon: the daemon's own."""
    return os.getuid()


def allowed(uid: int | None) -> bool:
    """Policy: same user only. Unknown credentials are refused (fail closed)."""
    return uid is not None and uid == expected_uid()


# -- framing helpers -----------------------------------------------------------------


def _error(rid: Any, code: int, message: str, kind: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if kind is not None:
        error["data"] = {"kind": kind}
    return {"jsonrpc": "2.0", "id": rid, "error": error}


def _json_type(value: Any) -> str:
    for cls, name in _JSON_TYPES.items():
        if type(value) is cls:
            return name
    return type(value).__name__


_SIGNATURE_ERROR = re.compile(
    r"(got an unexpected keyword argument|missing \d+ required (keyword-only |positional )?"
    r"arguments?|got multiple values for argument|takes \d+ positional arguments? but)"
)


def _is_signature_error(exc: TypeError) -> bool:
    """A TypeError from calling with wrong parameter names, not a bug deeper inside."""
    return bool(_SIGNATURE_ERROR.search(str(exc)))


# -- peers and connections -----------------------------------------------------------


class Peer:
    """One connected client, as handlers see it."""

    def __init__(self, conn: _Connection, uid: int | None, peer_id: int) -> None:
        self._conn = conn
        self.uid = uid
        self.id = peer_id
        self.subscriptions: set[str] = set()

    @property
    def closed(self) -> bool:
        return self._conn.closed

    def subscribed(self, topic: str) -> bool:
        return topic in self.subscriptions or "*" in self.subscriptions

    async def notify(self, method: str, params: Any = None) -> bool:
        """Push a notification to this client. Never raises; False when it could not be sent
        (the connection is closed, or the params are not JSON-serialisable)."""
        if self._conn.closed:
            return False
        try:
            data = _encode(envelope(method, params))
        except (TypeError, ValueError):
            log.exception("notification %s could not be encoded as JSON", method)
            return False
        return await self._conn.send(data)

    def __repr__(self) -> str:
        return f"<Peer id={self.id} uid={self.uid} closed={self.closed}>"


class _Connection:
    def __init__(
        self,
        server: RpcServer,
        writer: asyncio.StreamWriter,
        uid: int | None,
        peer_id: int,
    ) -> None:
        self.server = server
        self.writer = writer
        self.peer = Peer(self, uid, peer_id)
        self.tasks: set[asyncio.Task[None]] = set()
        self.lock = asyncio.Lock()
        self.closed = False

    def spawn(self, line: bytes) -> None:
        task = asyncio.get_running_loop().create_task(self.server._handle_line(self, line))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def send(self, data: bytes) -> bool:
        if self.closed:
            return False
        try:
            async with self.lock:
                if self.closed:
                    return False
                self.writer.write(data)
                async with asyncio.timeout(self.server.write_timeout):
                    await self.writer.drain()
            return True
        except TimeoutError:
            self.abort(f"the client read nothing for {self.server.write_timeout:g} s")
        except (ConnectionError, OSError, RuntimeError) as exc:
            self.abort(f"write failed: {exc or type(exc).__name__}")
        return False

    def abort(self, reason: str) -> None:
        """Stop everything on this connection now (the serving task awaits the tasks)."""
        if self.closed:
            return
        log.debug("peer %s: closing connection: %s", self.peer.id, reason)
        self.closed = True
        for task in self.tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            self.writer.close()

    async def close(self) -> None:
        self.abort("connection finished")
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


# -- the server ----------------------------------------------------------------------


class RpcServer:
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
        write_timeout: float = 30.0,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.max_frame = max_frame
        self.write_timeout = write_timeout
        self._handlers: dict[str, Handler] = {
            "rpc.ping": self._ping,
            "rpc.subscribe": self._subscribe,
            "rpc.unsubscribe": self._unsubscribe,
        }
        for name, handler in handlers.items():
            self.register(name, handler)
        self._server: asyncio.AbstractServer | None = None
        self._socket_id: tuple[int, int] | None = None
        self._connections: set[_Connection] = set()
        self._serving: set[asyncio.Task[Any]] = set()
        self._peer_ids = itertools.count(1)
        self._stopping = False

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
        ensure_private_dir(path.parent)
        remove_stale_socket(path)
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
                self._serve, sock=sock, limit=self.max_frame
            )
        except BaseException:
            sock.close()
            self._unlink_own_socket()
            raise
        log.info("listening on %s", path)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping = True
        server.close()
        for task in list(self._serving):
            task.cancel()
        while self._serving:
            await asyncio.gather(*list(self._serving), return_exceptions=True)
        with contextlib.suppress(Exception):
            await server.wait_closed()
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
        with contextlib.suppress(OSError):
            st = os.stat(self.socket_path)
            if (st.st_dev, st.st_ino) == self._socket_id:
                os.unlink(self.socket_path)
        self._socket_id = None

    # notifications

    async def broadcast(self, topic: str, method: str, params: Any = None) -> int:
        """Notify every peer subscribed to ``topic`` (or to ``"*"``), concurrently.

        Dead or stuck peers are skipped (and closed); returns how many got it."""
        targets = [c for c in self._connections if not c.closed and c.peer.subscribed(topic)]
        if not targets:
            return 0
        data = _encode(envelope(method, params))
        results = await asyncio.gather(*(c.send(data) for c in targets))
        return sum(results)

    # connections

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._stopping:
            writer.close()
            return
        self._serving.add(task)
        uid = peer_uid(writer.get_extra_info("socket"))
        conn = _Connection(self, writer, uid, next(self._peer_ids))
        try:
            if not allowed(uid):
                log.warning(
                    "refused a connection from uid %s (daemon runs as uid %s)", uid, expected_uid()
                )
                who = "unknown" if uid is None else str(uid)
                await conn.send(
                    _encode(
                        _error(
                            None,
                            ACCESS_DENIED,
                            f"access denied: peer uid {who} is not the daemon's user",
                            "AccessDenied",
                        )
                    )
                )
                return
            self._connections.add(conn)
            await self._read_loop(conn, reader)
        except asyncio.CancelledError:
            # stop() cancels us; end normally so asyncio's stream callback does not log it.
            if not self._stopping:
                raise
        finally:
            try:
                await conn.close()
            finally:
                self._connections.discard(conn)
                self._serving.discard(task)

    async def _read_loop(self, conn: _Connection, reader: asyncio.StreamReader) -> None:
        while not conn.closed:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                # EOF. A last frame without a newline still counts (half-closed clients).
                if exc.partial.strip():
                    conn.spawn(exc.partial)
                break
            except asyncio.LimitOverrunError as exc:
                await self._too_large(conn, reader, exc.consumed)
                return
            except ValueError:
                await self._too_large(conn, reader, self.max_frame + 1)
                return
            except (ConnectionError, OSError):
                conn.abort("read failed")
                return
            if line.strip():
                conn.spawn(line)
        # The client sent EOF: finish what it asked for (it may still be reading), then close.
        while conn.tasks and not conn.closed:
            await asyncio.wait(set(conn.tasks))

    async def _too_large(self, conn: _Connection, reader: asyncio.StreamReader, size: int) -> None:
        message = f"request too large ({size} bytes, limit {self.max_frame})"
        if await conn.send(_encode(_error(None, INVALID_REQUEST, message, "FrameTooLarge"))):
            # Closing a Unix socket with unread input resets the peer, which then loses the
            # error above: drop what the client is still sending (briefly) before closing.
            with contextlib.suppress(Exception):
                conn.writer.write_eof()
                async with asyncio.timeout(LINGER_S):
                    while await reader.read(65536):
                        pass
        conn.abort(message)

    # requests

    async def _handle_line(self, conn: _Connection, line: bytes) -> None:
        data = await self._process(conn.peer, line)
        if data is not None:
            await conn.send(data)

    async def _process(self, peer: Peer, line: bytes) -> bytes | None:
        try:
            msg = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return _encode(
                _error(None, PARSE_ERROR, f"parse error: request is not UTF-8 (byte {exc.start})")
            )
        except json.JSONDecodeError as exc:
            return _encode(
                _error(
                    None,
                    PARSE_ERROR,
                    f"parse error: invalid JSON: {exc.msg} at line {exc.lineno} "
                    f"column {exc.colno} (char {exc.pos})",
                )
            )
        if not isinstance(msg, dict):
            what = "batch requests are not supported" if isinstance(msg, list) else None
            return _encode(
                _error(
                    None,
                    INVALID_REQUEST,
                    "invalid request: "
                    + (what or f"expected a JSON object, got {_json_type(msg)}"),
                )
            )
        is_call = "id" in msg
        rid = msg.get("id")
        if not (rid is None or isinstance(rid, str) or (type(rid) is int)):
            return _encode(
                _error(
                    None,
                    INVALID_REQUEST,
                    f"invalid request: 'id' must be a string, an integer or null, "
                    f"got {_json_type(rid)}",
                )
            )
        problem = self._shape_problem(msg)
        if problem is not None:
            return _encode(_error(rid, INVALID_REQUEST, f"invalid request: {problem}"))
        method: str = msg["method"]
        params: dict[str, Any] = msg.get("params") or {}
        response = await self._call(peer, rid, method, params)
        if not is_call:  # a notification from the client: no reply, errors only logged
            if "error" in response:
                log.info("notification %s failed: %s", method, response["error"]["message"])
            return None
        try:
            return _encode(response)
        except (TypeError, ValueError) as exc:
            log.error("result of %s is not JSON-serialisable: %s", method, exc)
            return _encode(
                _error(
                    rid,
                    INTERNAL_ERROR,
                    f"internal error: the result of {method} could not be encoded as JSON",
                    type(exc).__name__,
                )
            )

    @staticmethod
    def _shape_problem(msg: dict[str, Any]) -> str | None:
        if msg.get("jsonrpc", "2.0") != "2.0":
            return "'jsonrpc' must be \"2.0\""
        if "method" not in msg:
            return "missing 'method'"
        if not isinstance(msg["method"], str) or not msg["method"]:
            return f"'method' must be a non-empty string, got {_json_type(msg['method'])}"
        params = msg.get("params")
        if params is not None and not isinstance(params, dict):
            return f"'params' must be an object (named parameters), got {_json_type(params)}"
        return None

    async def _call(
        self, peer: Peer, rid: Any, method: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        handler = self._handlers.get(method)
        if handler is None:
            hint = difflib.get_close_matches(method, list(self._handlers), n=1)
            message = f"unknown method {method!r}" + (
                f" (did you mean {hint[0]!r}?)" if hint else ""
            )
            return _error(rid, METHOD_NOT_FOUND, message)
        try:
            result = await handler(params, peer)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this request itself is being cancelled (connection closed, stop())
            return _error(rid, REQUEST_CANCELLED, f"{method} was cancelled", "Cancelled")
        except NotFound as exc:
            return _error(rid, NOT_FOUND, str(exc), type(exc).__name__)
        except InvalidInput as exc:
            return _error(rid, INVALID_PARAMS, str(exc), type(exc).__name__)
        except NaviError as exc:
            return _error(rid, APP_ERROR, str(exc), type(exc).__name__)
        except TypeError as exc:
            if _is_signature_error(exc):
                return _error(
                    rid, INVALID_PARAMS, f"invalid params for {method}: {exc}", "InvalidInput"
                )
            log.exception("internal error in %s", method)
            return _error(
                rid,
                INTERNAL_ERROR,
                f"internal error in {method}: TypeError (see the daemon log)",
                "TypeError",
            )
        except Exception as exc:
            log.exception("internal error in %s", method)
            return _error(
                rid,
                INTERNAL_ERROR,
                f"internal error in {method}: {type(exc).__name__} (see the daemon log)",
                type(exc).__name__,
            )
        return {"jsonrpc": "2.0", "id": rid, "result": result}

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
    unknown = set(params) - {"topics"}
    if unknown:
        raise InvalidInput(f"unknown parameter {sorted(unknown)[0]!r} (expected: topics)")
    topics = params.get("topics")
    if not isinstance(topics, list) or not all(isinstance(t, str) and t for t in topics):
        raise InvalidInput("'topics' must be a list of non-empty strings")
    return topics


def remove_stale_socket(path: Path) -> None:
    """Remove a socket file nothing listens on; refuse if a server answers or it is no socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise NaviError(f"{path} exists and is not a socket; move it away and try again")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        log.info("removed the stale socket %s", path)
        return
    except OSError as exc:
        raise NaviError(f"cannot check the existing socket {path}: {exc.strerror or exc}") from exc
    finally:
        probe.close()
    raise NaviError(f"another daemon is already listening on {path}")


# -- handlers from plain functions ---------------------------------------------------


def expose(func: Callable[..., Awaitable[Any]]) -> Handler:
    """Wrap ``async def f(*, a: str, b: int = 0, peer: Peer)`` as a :data:`Handler`.

    Params bind by name; unknown or missing names and values whose JSON type does not
    match a simple annotation (str, int, float, bool, list, dict, X | None, Any) raise
    ``InvalidInput`` naming the parameter. A parameter named ``peer`` receives the Peer.
    """
    sig = inspect.signature(func)
    try:
        hints = typing.get_type_hints(func)
    except Exception:
        hints = {}
    wants_peer = "peer" in sig.parameters
    named = [
        p
        for p in sig.parameters.values()
        if p.name != "peer"
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    takes_extra = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
    names = [p.name for p in named]
    required = [p.name for p in named if p.default is inspect.Parameter.empty]

    async def handler(params: dict[str, Any], peer: Peer) -> Any:
        if not takes_extra:
            for key in params:
                if key not in names:
                    expected = ", ".join(names) or "no parameters"
                    raise InvalidInput(f"unknown parameter {key!r} (expected: {expected})")
        for name in required:
            if name not in params:
                raise InvalidInput(f"missing required parameter {name!r}")
        for name, value in params.items():
            hint = hints.get(name)
            if hint is not None and not _matches(value, hint):
                raise InvalidInput(
                    f"parameter {name!r} must be {_describe(hint)}, got {_json_type(value)}"
                )
        kwargs = dict(params)
        if wants_peer:
            kwargs["peer"] = peer
        return await func(**kwargs)

    handler.__name__ = getattr(func, "__name__", "handler")
    handler.__doc__ = func.__doc__
    return handler


def _matches(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is None or hint is type(None):
        return value is None
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    cls = origin or hint
    if cls is float:
        return type(value) in (int, float)
    if cls is int:
        return type(value) is int
    if cls in (str, bool, list, dict):
        return isinstance(value, cls)
    return True  # anything richer is the handler's to check


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    return _JSON_TYPES.get(origin or hint, getattr(hint, "__name__", str(hint)))
