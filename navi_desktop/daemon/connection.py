"""One client connection of the daemon: reading frames with backpressure, and writing
replies and notifications without ever letting a slow reader hold up anyone else.

Writing: a frame goes straight to the socket's transport while nothing is waiting and the
transport's buffer is small; otherwise it joins this connection's own queue, which its own
writer task empties as the client reads. Nothing outside the connection ever awaits it:

* a notification finding the queue full drops the client (it stopped reading);
* a reply always joins the queue, and the reader stops taking new requests while more
  than ``max_unread`` bytes wait there, so a client that pipelines without reading only
  stops itself (and costs no more work once its replies pile up);
* a client that reads nothing for ``write_timeout`` seconds is dropped.

Reading: at most ``max_in_flight`` requests run at once per connection; past that the
connection is not read until one finishes (the kernel then stops the client's writes).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import select
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from navi_desktop.daemon.wire import INVALID_REQUEST, encode, envelope

log = logging.getLogger("navi_desktop.daemon.rpc")

# The transport writes ahead of our queue up to this many buffered bytes (asyncio's own
# default high-water mark, where it starts asking writers to wait).
TRANSPORT_HIGH = 64 * 1024
LINGER_S = 1.0  # how long a client whose frame was too large may go on sending
HANGUP_POLL_S = 0.25  # how often a client that sent EOF is checked for having gone
TELLS_HANGUP = hasattr(select, "POLLRDHUP")  # Linux's poll (see Connection.hung_up)


@dataclass(frozen=True)
class Limits:
    """What one client may hold of the daemon. Generous for people, bounded for floods."""

    max_frame: int = 8 * 1024 * 1024  # bytes in one request
    max_in_flight: int = 64  # requests running at once, per connection
    max_backlog: int = 4 * 1024 * 1024  # bytes queued for a client before it is dropped
    max_unread: int = 64 * 1024  # bytes of replies queued before its requests wait
    write_timeout: float = 30.0  # seconds a client may read nothing while we wait to write
    max_connections: int = 1000
    idle_timeout: float = 600.0  # seconds without a request before a non-subscriber is closed


class Peer:
    """One connected client, as handlers see it."""

    def __init__(self, conn: Connection, uid: int | None, peer_id: int) -> None:
        self._conn = conn
        self.uid = uid
        self.id = peer_id
        self.subscriptions: set[str] = set()

    @property
    def closed(self) -> bool:
        return self._conn.closed

    def stop_when_gone(self, task: asyncio.Future[Any]) -> None:
        """Cancel ``task`` as soon as this client closes its connection: work that streams
        to it and is worth nothing once it has gone (a chat turn, which keeps what came).
        Other requests of a client that went away run to their end."""
        self._conn.stop_when_gone(task)

    def subscribed(self, topic: str) -> bool:
        return topic in self.subscriptions or "*" in self.subscriptions

    async def notify(self, method: str, params: Any = None) -> bool:
        """Push a notification to this client. Never raises and never waits; False when it
        could not be sent (the connection is closed or was dropped for not reading, or the
        params are not JSON-serialisable)."""
        if self._conn.closed:
            return False
        try:
            data = encode(envelope(method, params))
        except (TypeError, ValueError, RecursionError):
            log.error("notification %s could not be encoded as JSON; not sent", method)
            return False
        return self._conn.push(data)

    def __repr__(self) -> str:
        return f"<Peer id={self.id} uid={self.uid} closed={self.closed}>"


class Connection:
    """The frames of one client, both ways. :meth:`serve` runs it to the end."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        uid: int | None,
        peer_id: int,
        limits: Limits,
        handle: Callable[[Connection, bytes], Awaitable[None]],
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.limits = limits
        self.peer = Peer(self, uid, peer_id)
        self.tasks: set[asyncio.Task[None]] = set()
        self.closed = False
        self.last_active = asyncio.get_running_loop().time()
        self._handle = handle
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = 0  # bytes in _queue
        self._wake = asyncio.Event()  # something to write
        self._room = asyncio.Event()  # a request finished or the queue shrank
        self._writer_task: asyncio.Task[None] | None = None
        self._gone_stops: set[asyncio.Future[Any]] = set()  # see stop_when_gone
        self._gone = False  # the client closed its end for good (hung_up), once seen

    # -- writing ------------------------------------------------------------------------

    def push(self, data: bytes) -> bool:
        """A notification: queued, or the client dropped when its queue is full."""
        if self.closed:
            return False
        if self._queued and self._queued + len(data) > self.limits.max_backlog:
            self.drop(
                f"it stopped reading ({self._queued + len(data)} bytes of notifications "
                f"waiting, limit {self.limits.max_backlog})"
            )
            return False
        return self._put(data)

    def reply(self, data: bytes) -> bool:
        """A reply to one of this client's requests: always queued (the reader stops taking
        requests while the queue is full, which bounds it)."""
        if self.closed:
            return False
        return self._put(data)

    def _put(self, data: bytes) -> bool:
        transport = self.writer.transport
        if transport.is_closing():  # the client went away
            self.abort("the client closed the connection")
            return False
        if not self._queue and transport.get_write_buffer_size() <= TRANSPORT_HIGH:
            try:
                self.writer.write(data)
            except (ConnectionError, OSError, RuntimeError) as exc:
                self.abort(f"write failed: {exc or type(exc).__name__}")
                return False
            return True
        self._queue.append(data)
        self._queued += len(data)
        if self._writer_task is None:
            self._writer_task = asyncio.get_running_loop().create_task(self._write_queue())
        self._wake.set()
        return True

    async def _write_queue(self) -> None:
        """This connection's writer: empties the queue as fast as the client reads."""
        try:
            while not self.closed:
                await self._wake.wait()
                self._wake.clear()
                while self._queue and not self.closed:
                    async with asyncio.timeout(self.limits.write_timeout):
                        await self.writer.drain()
                    if self.writer.transport.is_closing():
                        raise ConnectionResetError("the client closed the connection")
                    data = self._queue.popleft()
                    self._queued -= len(data)
                    self.writer.write(data)
                    self._room.set()
        except TimeoutError:
            self.drop(f"it read nothing for {self.limits.write_timeout:g} s")
        except (ConnectionError, OSError, RuntimeError) as exc:
            self.abort(f"write failed: {exc or type(exc).__name__}")

    async def flushed(self) -> None:
        """Wait until the queue is handed to the transport (bounded by the write timeout)."""
        while self._queue and not self.closed:
            self._room.clear()
            await self._room.wait()

    # -- reading ------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return bool(self.tasks) or bool(self._queue)

    async def serve(self) -> None:
        """Read frames until EOF, then finish what the client asked for."""
        reader = self.reader
        while not self.closed:
            while not self.closed and (
                len(self.tasks) >= self.limits.max_in_flight
                or self._queued > self.limits.max_unread
            ):
                self._room.clear()  # backpressure: read nothing until there is room
                await self._room.wait()
            if self.closed:
                return
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                if self.writer.transport.is_closing():  # gone, not only done sending
                    self.abort("the client closed the connection")
                    return
                # EOF. A last frame without a newline still counts (half-closed clients).
                if exc.partial.strip():
                    self._spawn(exc.partial)
                break
            except asyncio.LimitOverrunError as exc:
                await self.too_large(exc.consumed)
                return
            except ValueError:
                await self.too_large(self.limits.max_frame + 1)
                return
            except (ConnectionError, OSError):
                self.abort("read failed")
                return
            self.last_active = asyncio.get_running_loop().time()
            if line.strip() and not self.closed:
                self._spawn(line)
                # One frame per turn of the loop: a client with many frames buffered takes
                # turns with the others instead of filling the loop with its requests.
                await asyncio.sleep(0)
        # The client sent EOF: finish what it asked for (it may still be reading), then close.
        # Watched while anything runs: a turn may ask to stop with the client only after a
        # few awaits, by when a client that closed right after sending is gone already.
        while self.tasks and not self.closed:
            await asyncio.wait(set(self.tasks), timeout=HANGUP_POLL_S if TELLS_HANGUP else None)
            if not self._gone and self.hung_up():
                # It closed its socket (Ctrl+C, a killed client): what streams to it stops
                # now, not at its next write (a stalled model's turn held its session for
                # minutes). The rest runs to its end, as before.
                self._gone = True
                for task in self._gone_stops:
                    task.cancel()  # once: a chat turn goes on to keep what came
                self._gone_stops.clear()
        await self.flushed()

    def stop_when_gone(self, task: asyncio.Future[Any]) -> None:
        """Cancel ``task`` once the client has closed its connection (:meth:`hung_up`)."""
        if self.closed or self._gone:
            task.cancel()
            return
        self._gone_stops.add(task)
        task.add_done_callback(self._gone_stops.discard)

    def hung_up(self) -> bool:
        """The client closed its end for good, not only its sending half (whose requests
        are still answered). Linux tells them apart on a Unix socket: POLLHUP only once both
        halves are shut. Elsewhere a client that went away is noticed at the next write."""
        sock = self.writer.get_extra_info("socket")
        if sock is None or not TELLS_HANGUP:
            return False
        poller = select.poll()
        try:
            poller.register(sock.fileno(), 0)  # POLLHUP and POLLERR are always reported
            return bool(poller.poll(0))
        except (OSError, ValueError):  # closed meanwhile
            return True

    def _spawn(self, line: bytes) -> None:
        task = asyncio.get_running_loop().create_task(self._handle(self, line))
        self.tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.last_active = asyncio.get_running_loop().time()
        self._room.set()
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("peer %s: a request failed unexpectedly: %r", self.peer.id, exc)

    async def too_large(self, size: int) -> None:
        message = f"request too large ({size} bytes, limit {self.limits.max_frame})"
        self.reply(error_frame(None, INVALID_REQUEST, message, "FrameTooLarge"))
        await self.flushed()
        if not self.closed:
            # Closing a Unix socket with unread input resets the peer, which then loses the
            # error above: drop what the client is still sending (briefly) before closing.
            with contextlib.suppress(Exception):
                self.writer.write_eof()
                async with asyncio.timeout(LINGER_S):
                    while await self.reader.read(65536):
                        pass
        self.abort(message)

    # -- closing ------------------------------------------------------------------------

    def drop(self, reason: str) -> None:
        """Drop a client that does not read: one log line, and its buffers freed now."""
        if self.closed:
            return
        log.warning("peer %s: dropped: %s", self.peer.id, reason)
        self.abort(reason, hard=True)

    def abort(self, reason: str, *, hard: bool = False) -> None:
        """Stop everything on this connection now (:meth:`close` awaits the tasks). ``hard``
        discards what the transport still holds instead of flushing it first."""
        if self.closed:
            return
        log.debug("peer %s: closing connection: %s", self.peer.id, reason)
        self.closed = True
        self._room.set()
        self._wake.set()
        for task in self.tasks:
            task.cancel()
        self._queue.clear()
        self._queued = 0
        # Wakes the read loop, wherever it waits (it then ends).
        self.reader.set_exception(ConnectionAbortedError(reason))
        with contextlib.suppress(Exception):
            if hard:
                self.writer.transport.abort()  # a client that does not read never drains
            else:
                self.writer.close()

    async def close(self, *, hard: bool = False, linger: float | None = None) -> None:
        """Close, await every task of this connection, and let the transport go: flushed
        within ``linger`` seconds (the write timeout by default); a client that does not
        read by then loses the rest."""
        self.abort("connection finished", hard=hard)
        pending: list[asyncio.Task[Any]] = list(self.tasks)
        if self._writer_task is not None:
            self._writer_task.cancel()
            pending.append(self._writer_task)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        try:
            wait = LINGER_S if hard else linger if linger is not None else self.limits.write_timeout
            async with asyncio.timeout(wait):
                await self.writer.wait_closed()
        except TimeoutError:
            self.writer.transport.abort()
        except Exception:  # the client reset the connection: nothing left to do
            pass


def error_reply(
    rid: Any, code: int, message: str, kind: str | None = None, data: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One JSON-RPC error reply; ``kind`` (the error's class) goes in ``data.kind``, beside
    what else ``data`` tells (wire.add_error_data)."""
    error: dict[str, Any] = {"code": code, "message": message}
    told = dict(data or {})
    if kind is not None:
        told["kind"] = kind
    if told:
        error["data"] = told
    return {"jsonrpc": "2.0", "id": rid, "error": error}


def error_frame(rid: Any, code: int, message: str, kind: str | None = None) -> bytes:
    """:func:`error_reply`, encoded."""
    return encode(error_reply(rid, code, message, kind))
