"""Client side of the daemon socket: calls matched by id, notifications on a queue.

Errors come back as exceptions a CLI can treat like local ones: an invalid-params reply
raises an ``InvalidInput`` (exit code 2), a not-found reply a ``NotFound``; both are also
:class:`RpcCallError` carrying ``code``, ``message`` and ``kind``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, NamedTuple

from navi_desktop.daemon.peercred import peer_uid, user_label
from navi_desktop.daemon.wire import (
    INVALID_PARAMS,
    NOT_FOUND,
    REQUEST_CANCELLED,
    FrameError,
    decode,
    encode,
    envelope,
)
from navi_desktop.errors import CorruptDatabase, InvalidInput, NaviError, NotFound
from navi_desktop.terminal_text import FRAME_CONTROL, safe_data

log = logging.getLogger(__name__)

__all__ = [
    "DaemonClient",
    "DaemonNotTrusted",
    "DaemonUnavailable",
    "Notification",
    "RemoteCorruptDatabase",
    "RemoteInvalidInput",
    "RemoteNotFound",
    "RpcCallError",
    "RpcTimeout",
    "call_sync",
]

DEFAULT_MAX_FRAME = 64 * 1024 * 1024
SLOW_AFTER_S = 10.0  # a call's wait before a client that set on_slow hears of it


class DaemonUnavailable(NaviError):
    """No daemon answers on the socket, or it went away."""

    def __init__(self, message: str, socket_path: Path | None = None) -> None:
        super().__init__(message)
        self.socket_path = socket_path


class RpcTimeout(DaemonUnavailable):
    """The daemon did not answer a call in time."""


class NotConnected(DaemonUnavailable):
    """A call made while disconnected: nothing of it was sent."""


class DaemonNotTrusted(NaviError):
    """What listens at the socket path is not run by this user: nothing was sent to it."""


class RpcCallError(NaviError):
    """The daemon answered a call with an error."""

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        kind: str | None = None,
        data: Any = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.kind = kind
        self.data = data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code}, kind={self.kind!r})"


class RemoteInvalidInput(RpcCallError, InvalidInput):
    """The daemon rejected the call's parameters (-32602)."""


class RemoteNotFound(RpcCallError, NotFound):
    """The call named something that does not exist (-32001)."""


class RemoteCorruptDatabase(RpcCallError, CorruptDatabase):
    """The daemon found the profile's file damaged or foreign (and left it untouched)."""


class Notification(NamedTuple):
    method: str
    params: Any


def error_from_reply(error: Any) -> RpcCallError:
    """The exception for a JSON-RPC ``error`` member."""
    if not isinstance(error, dict):
        return RpcCallError(f"malformed error reply from the daemon: {error!r}")
    code = error.get("code")
    message = str(error.get("message") or f"the daemon answered with error {code}")
    data = error.get("data")
    kind = data.get("kind") if isinstance(data, dict) else None
    cls: type[RpcCallError] = RpcCallError
    if code == NOT_FOUND or kind == "NotFound":
        cls = RemoteNotFound
    elif code == INVALID_PARAMS or kind == "InvalidInput":
        cls = RemoteInvalidInput
    elif kind == "CorruptDatabase" or (kind or "").startswith("Profile"):  # ProfileDamaged...
        cls = RemoteCorruptDatabase
    return cls(message, code=code, kind=kind, data=data)


def message_kept(err: BaseException, *, heard: bool) -> bool | None:
    """Whether the daemon kept the message of a ``chat.send`` that failed with ``err``: the
    app and ``navi chat`` give back a message not kept, to be sent again. The daemon keeps it
    before it asks for the reply, so a word of the reply proves it (``heard``). Its error
    reply tells it (``data.stored``); one without it was refused before the turn began (its
    parameters), unless cancelled, which may have come after the keeping. A call that never
    left kept nothing. None: not known (the daemon went away before it told)."""
    if heard:
        return True
    told = err.data if isinstance(err, RpcCallError) and isinstance(err.data, dict) else {}
    if isinstance(told.get("stored"), bool):
        return told["stored"]
    if isinstance(err, NotConnected):
        return False
    if isinstance(err, RpcCallError) and err.code != REQUEST_CANCELLED:
        return False
    return None


_CLOSED = object()


class DaemonClient:
    """One connection to the daemon. Use :meth:`connect`; ``async with`` closes it."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, socket_path: Path
    ) -> None:
        self.socket_path = socket_path
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._notifications: asyncio.Queue[Any] = asyncio.Queue()
        self._write_lock = asyncio.Lock()
        self._closed = False
        self._fatal: dict[str, Any] | None = None  # an id-less error the daemon sent
        self._broken: str | None = None  # why this client stopped reading the daemon
        # Control characters in every string read are replaced (terminal_text.safe_data),
        # for a client that shows what it reads on a terminal (the app).
        self.safe_text = False
        # Told once when a call without a time limit has waited ``slow_after`` seconds (the
        # CLI says so: a daemon stopped with SIGSTOP, or busy, is otherwise silence).
        self.on_slow: Callable[[str], None] | None = None
        self.slow_after = SLOW_AFTER_S
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(
        cls, socket_path: Path | str, timeout: float = 5.0, *, max_frame: int = DEFAULT_MAX_FRAME
    ) -> DaemonClient:
        path = Path(socket_path)
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(
                    os.fspath(path), limit=max_frame
                )
        except FileNotFoundError:
            raise DaemonUnavailable(
                f"no Navi daemon is running: {path} does not exist "
                "(start it with `navi daemon start`)",
                path,
            ) from None
        except ConnectionRefusedError:
            raise DaemonUnavailable(
                f"no Navi daemon is listening on {path} (a stale socket left by a daemon "
                "that exited; `navi daemon start` replaces it)",
                path,
            ) from None
        except PermissionError:
            raise DaemonUnavailable(
                f"cannot connect to the Navi daemon at {path}: permission denied", path
            ) from None
        except TimeoutError:
            raise DaemonUnavailable(
                f"the Navi daemon at {path} did not accept the connection within {timeout:g} s",
                path,
            ) from None
        except OSError as exc:
            raise DaemonUnavailable(
                f"cannot connect to the Navi daemon at {path}: {exc.strerror or exc}", path
            ) from None
        # Before a byte is sent: only a daemon of this user may hear what the user types.
        uid = peer_uid(writer.get_extra_info("socket"))
        if uid is None or uid != os.geteuid():
            writer.transport.abort()
            raise DaemonNotTrusted(
                f"refusing to talk to {path}: it is served by {user_label(uid)}, not by you"
                f" ({user_label(os.geteuid())}); nothing was sent. Stop that program or remove"
                " the socket, then start Navi again"
            )
        return cls(reader, writer, path)

    @property
    def closed(self) -> bool:
        return self._closed

    async def call(
        self, method: str, params: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Any:
        """Call ``method`` and return its result; raise :class:`RpcCallError` (or
        ``InvalidInput``/``NotFound`` subclasses of it) on an error reply."""
        rid = next(self._ids)
        data = encode(envelope(method, params, rid))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            await self._send(data)
            if timeout is None:
                if self.on_slow is not None:
                    try:
                        async with asyncio.timeout(self.slow_after):
                            return await asyncio.shield(future)
                    except TimeoutError:
                        on_slow, self.on_slow = self.on_slow, None  # once per client
                        on_slow(method)
                return await future
            try:
                async with asyncio.timeout(timeout):
                    return await future
            except TimeoutError:
                raise RpcTimeout(
                    f"the Navi daemon did not answer {method} within {timeout:g} s",
                    self.socket_path,
                ) from None
        finally:
            self._pending.pop(rid, None)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification (no id, no reply), e.g. to cancel a stream."""
        await self._send(encode(envelope(method, params)))

    async def subscribe(self, *topics: str) -> list[str]:
        result = await self.call("rpc.subscribe", {"topics": list(topics)})
        return list(result["topics"])

    async def unsubscribe(self, *topics: str) -> list[str]:
        result = await self.call("rpc.unsubscribe", {"topics": list(topics)})
        return list(result["topics"])

    async def notifications(self) -> AsyncIterator[Notification]:
        """Notifications in arrival order; ends when the connection closes."""
        while True:
            item = await self._notifications.get()
            if item is _CLOSED:
                self._notifications.put_nowait(_CLOSED)  # later iterators end too
                return
            yield item

    async def close(self) -> None:
        if not self._reader_task.done():
            self._reader_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader_task
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()

    async def __aenter__(self) -> DaemonClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # internals

    async def _send(self, data: bytes) -> None:
        if self._closed:
            raise self._unavailable()
        try:
            async with self._write_lock:
                self._writer.write(data)
                await self._writer.drain()
        except (ConnectionError, OSError, RuntimeError):
            raise self._unavailable() from None

    def _unavailable(self) -> NaviError:
        if self._fatal is not None:
            return error_from_reply(self._fatal)
        if self._broken is not None:
            return DaemonUnavailable(self._broken, self.socket_path)
        return DaemonUnavailable("the daemon closed the connection", self.socket_path)

    async def _read_loop(self) -> None:
        try:
            while True:
                try:
                    line = await self._reader.readuntil(b"\n")
                except asyncio.IncompleteReadError:
                    break
                except asyncio.LimitOverrunError as exc:
                    self._broken = f"the daemon sent a frame over {exc.consumed} bytes"
                    break
                except (ConnectionError, OSError):
                    break
                try:
                    self._dispatch(line)
                except FrameError as exc:  # its id is unknown: no call could ever end
                    self._broken = f"the daemon sent a frame this client cannot read ({exc})"
                    break
        finally:
            self._closed = True
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(self._unavailable())
            self._pending.clear()
            self._notifications.put_nowait(_CLOSED)
            self._writer.close()

    def _dispatch(self, line: bytes) -> None:
        msg = decode(line)
        if not isinstance(msg, dict):
            return
        if self.safe_text and FRAME_CONTROL.search(line):
            msg = safe_data(msg)
        if "result" in msg or "error" in msg:
            rid = msg.get("id")
            future = self._pending.get(rid) if isinstance(rid, int) else None
            if future is None:
                if rid is None and "error" in msg:
                    self._fatal = msg["error"]  # refused, or a frame rejected: closing follows
                return
            if future.done():
                return
            if "error" in msg:
                future.set_exception(error_from_reply(msg["error"]))
            else:
                future.set_result(msg["result"])
        elif isinstance(msg.get("method"), str):
            self._notifications.put_nowait(Notification(msg["method"], msg.get("params")))


def call_sync(
    socket_path: Path | str,
    method: str,
    params: dict[str, Any] | None = None,
    timeout: float | None = 10.0,
) -> Any:
    """One call from synchronous code (scripts); not for use inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("call_sync() cannot run inside an event loop; use DaemonClient")

    async def _run() -> Any:
        client = await DaemonClient.connect(socket_path, timeout=timeout or 5.0)
        async with client:
            return await client.call(method, params, timeout=timeout)

    return asyncio.run(_run())
