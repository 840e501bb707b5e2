"""A server profile that keeps working through a brief outage of the memory server.

A chat turn stores the user's message before anything else can fail: an acknowledged message
is never lost. ``BufferedStore`` wraps the server store (opened lazily, and again after a
failed open) and takes the writes a turn needs (new sessions, messages) into a local outbox
(memory/outbox.py) while the server is unreachable; the turn's own reads (the session, its
recent messages) come from the server and the outbox together (the turn's memory reads give
nothing then: pipeline/context.py answers without memory). The outbox is replayed, in order, before
the next write once the server answers, and by ``keep_alive``. Everything else goes to the
server and says in one line that it is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from navi_desktop.errors import InvalidInput, NotFound, StorageUnavailable
from navi_desktop.memory.clock import check_iso, now_iso
from navi_desktop.memory.models import Message, Session
from navi_desktop.memory.outbox import Outbox
from navi_desktop.memory.pg.store import ROLES, PgMemoryStore

log = logging.getLogger(__name__)


def _message(row: Any) -> Message:
    # A negative id: provisional, until the server gives the message its own.
    meta = json.loads(row["meta"]) if row["meta"] else None
    return Message(
        -row["seq"], row["session_id"], row["role"], row["name"], row["content"], row["at"], meta
    )


def _session(row: Any) -> Session:
    return Session(row["session_id"], row["title"], row["at"], row["at"], "open", 0, None, None)


class BufferedStore:
    """A server store whose chat writes survive a brief outage (see the module's text).
    Any other method is the server store's own, opened first if it is not yet."""

    backend = "postgres"

    def __init__(
        self,
        opener: Callable[[], Awaitable[PgMemoryStore]],
        outbox: Outbox,
        on_open: Callable[[PgMemoryStore], Awaitable[None]] | None = None,
    ) -> None:
        self._opener = opener
        self._on_open = on_open
        self._store: PgMemoryStore | None = None
        self.away: str | None = None  # why the server did not answer the last call, if not
        self._opening = asyncio.Lock()
        self.outbox = outbox
        self._lock = asyncio.Lock()  # one replay at a time, and writes wait behind it

    async def server(self) -> PgMemoryStore:
        """The server store; opened now if it is not yet (StorageUnavailable if it cannot)."""
        if self._store is None:
            async with self._opening:
                if self._store is None:
                    store = await self._opener()
                    self._store = store
                    if self._on_open is not None:
                        await self._on_open(store)
        return self._store

    def __getattr__(self, name: str) -> Any:
        if self._store is not None:
            return getattr(self._store, name)
        attr = getattr(PgMemoryStore, name)  # AttributeError for what no store has
        if not inspect.iscoroutinefunction(attr):
            raise StorageUnavailable(f"memory server not connected yet (for {name})")

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._call(name, *args, **kwargs)

        return call

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
            self._store = None

    async def keep_alive(self) -> int:
        """Open the server store if it is not, and replay the outbox; the writes sent."""
        await self._call("get_meta", "profile_summary")  # connected, and answering
        return await self.replay()

    async def replay(self) -> int:
        """Send what the outbox holds to the server, in order; the number sent. Stops at the
        first write the server cannot take yet (the rest waits for the next try)."""
        async with self._lock:
            return await self._replay()

    async def _replay(self) -> int:
        sent = 0
        for row in await self.outbox.pending():
            if row["kind"] == "session":
                with contextlib.suppress(InvalidInput):  # already there: an earlier replay
                    await self._call(
                        "create_session", row["title"], session_id=row["session_id"], at=row["at"]
                    )
            elif not await self._already_sent(row):
                await self._send(row)
            await self.outbox.done(row["seq"])
            sent += 1
        if sent:
            log.info("memory server back: %d kept writes sent", sent)
        return sent

    async def _send(self, row: Any) -> None:
        server = await self.server()
        meta = json.loads(row["meta"]) if row["meta"] else None
        args = (row["session_id"], row["role"], row["content"])
        kwargs = {"name": row["name"], "at": row["at"], "meta": meta}
        try:
            await server.save_message(*args, **kwargs)
        except NotFound:  # its session was deleted meanwhile (another machine): kept anyway
            await server.create_session(session_id=row["session_id"], at=row["at"])
            await server.save_message(*args, **kwargs)

    async def _already_sent(self, row: Any) -> bool:
        """Whether an earlier replay stored this message and stopped before crossing it out."""
        recent = await self._call("messages", row["session_id"], last=20)
        return any(
            (m.role, m.content, m.created_at) == (row["role"], row["content"], row["at"])
            for m in recent
        )

    async def _flushed(self) -> bool:
        """True when the outbox is empty (replayed now if it held anything)."""
        if not await self.outbox.count():
            return True
        try:
            await self.replay()
        except StorageUnavailable:
            return False
        return not await self.outbox.count()

    # -- the writes and reads of a chat turn --------------------------------------------------

    async def create_session(
        self, title: str | None = None, *, session_id: str | None = None, at: str | None = None
    ) -> Session:
        if await self._flushed():
            try:
                return await self._call("create_session", title, session_id=session_id, at=at)
            except StorageUnavailable as exc:
                log.warning("keeping a new session locally: %s", exc)
        sid = session_id or uuid.uuid4().hex[:12]
        when = check_iso(at, "at") if at else now_iso()
        async with self._lock:
            seq = await self.outbox.add("session", sid, title=title, at=when)
        rows = [r for r in await self.outbox.pending() if r["seq"] == seq]
        return _session(rows[0])

    async def get_session(self, session_id: str) -> Session:
        try:
            return await self._call("get_session", session_id)
        except StorageUnavailable as exc:
            for row in await self.outbox.pending():
                if row["kind"] == "session" and row["session_id"] == session_id:
                    return _session(row)
            # Not checkable now: taken as it is named (a replayed message whose session is
            # gone makes it again, see _send), so the user's typing does not fail.
            log.warning("session %s taken unchecked: %s", session_id, exc)
            now = now_iso()
            return Session(session_id, None, now, now, "open", 0, None, None)

    async def save_message(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        name: str | None = None,
        at: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Message:
        if await self._flushed():
            try:
                return await self._call(
                    "save_message", session_id, role, content, name=name, at=at, meta=meta
                )
            except StorageUnavailable as exc:
                log.warning("keeping a message locally: %s", exc)
        if role not in ROLES:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        when = check_iso(at, "at") if at else now_iso()
        async with self._lock:
            seq = await self.outbox.add(
                "message",
                session_id,
                role=role,
                name=name,
                content=content,
                meta=json.dumps(meta) if meta else None,
                at=when,
            )
        return Message(-seq, session_id, role, name, content, when, meta)

    async def messages(
        self, session_id: str, *, after_id: int = 0, last: int | None = None
    ) -> list[Message]:
        await self._flushed()
        kept = [
            _message(r)
            for r in await self.outbox.pending()
            if r["kind"] == "message" and r["session_id"] == session_id
        ]
        try:
            stored = await self._call("messages", session_id, after_id=after_id, last=last)
        except StorageUnavailable:
            stored = []
        if not kept:
            return stored
        both = stored + kept
        return both[-last:] if last is not None else both

    async def record_injections(self, session_id: str, message_id: int | None, items: Any) -> None:
        if message_id is not None and message_id < 0:
            return  # a message still in the outbox: the server has no row to point at
        await self._or_nothing("record_injections", None, session_id, message_id, items)

    async def sessions_to_process(self, *args: Any, **kwargs: Any) -> list[Any]:
        return await self._or_nothing("sessions_to_process", [], *args, **kwargs)

    async def pending_status(self) -> tuple[int, str | None]:
        # The server away is the profile's own error in daemon.status (daemon/remote.py).
        return await self._or_nothing("pending_status", (0, None))

    async def _or_nothing(self, method: str, nothing: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._call(method, *args, **kwargs)
        except StorageUnavailable as exc:
            log.warning("%s without the memory server: %s", method, exc)
            return nothing

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``method`` of the server store; whether the server answers is kept in ``away``."""
        try:
            result = await getattr(await self.server(), method)(*args, **kwargs)
        except StorageUnavailable as exc:
            self.away = str(exc)
            raise
        self.away = None
        return result
