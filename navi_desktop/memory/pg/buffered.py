"""A server profile that keeps working through a brief outage of the memory server.

A chat turn stores the user's message before anything else can fail: an acknowledged message
is never lost. ``BufferedStore`` wraps the server store (opened lazily, and again after a
failed open) and takes the writes a turn needs (new sessions, messages) into a local outbox
(memory/outbox.py) while the server is unreachable; the turn's own reads (the session, its
recent messages) come from the server and the outbox together (the turn's memory reads give
nothing then: pipeline/context.py answers without memory). The outbox is replayed, in order, before
the next write once the server answers, and by ``keep_alive``. A server that stops answering
(a frozen host, a cut link without a reset) counts as away after ``ANSWER_S``: a turn never
hangs on it. Everything else goes to the server and says in one line that it is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from navi_desktop.errors import InvalidInput, NotFound, StorageUnavailable
from navi_desktop.memory.clock import check_iso, now_iso
from navi_desktop.memory.models import Message, Session
from navi_desktop.memory.outbox import Outbox
from navi_desktop.memory.pg.refusals import CONFLICTS, RETRIES, sqlstate
from navi_desktop.memory.pg.store import ROLES, PgMemoryStore

log = logging.getLogger(__name__)
# What the outbox kept is replayed as said before any forget, so every phrase forgotten
# everywhere is redacted from it, whenever it was forgotten: its time is this machine's clock
# and a forget's another machine's, and a clock ahead by minutes let a value forgotten meanwhile
# through. Erring on the side of forgetting: a phrase typed again, on purpose, while the server
# was away arrives redacted too.
BEFORE_ANY_FORGET = "0001-01-01T00:00:00.000Z"


def _waits_on_server(attr: Any) -> bool:
    """Whether calling ``attr`` asks the server: a coroutine method, or an async context
    manager's (``processing``, the session end's claim)."""
    return inspect.iscoroutinefunction(attr) or inspect.isasyncgenfunction(inspect.unwrap(attr))


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` came of waiting for the server (a connect or a statement past its
    bound), rather than of a refusal, which costs no wait."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, TimeoutError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


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
    # How long a chat turn's read or write waits for the server before keeping it locally,
    # and how long after such a wait the server is not asked again (keep_alive still asks):
    # a turn makes several calls, and each waiting its ANSWER_S made a turn take minutes.
    ANSWER_S = 10.0
    SILENT_S = 60.0

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
        # Why the outbox keeps writes, while it does: a server that refuses them (read-only,
        # a full disk) still answers reads, which clear ``away``.
        self.kept_why: str | None = None
        self._silent_until = 0.0  # monotonic time until which a silent server is not asked
        # Calls given up on (see _answer), held until they end: a task nothing refers to may
        # be collected before it finishes.
        self.given_up: set[asyncio.Future[Any]] = set()
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
        # AttributeError for what no store has; the class's own until the store is open.
        attr = getattr(self._store if self._store is not None else PgMemoryStore, name)
        if self._silent() and _waits_on_server(attr):
            # A turn's memory reads, a session end's claim: not one more wait on it.
            return self._refusal if inspect.iscoroutinefunction(attr) else self._refused
        if not inspect.iscoroutinefunction(attr):
            if self._store is None:
                raise StorageUnavailable(f"memory server not connected yet (for {name})")
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            # What the outbox kept goes first: sent after a delete or a forget, it brought
            # the session back, or the forgotten words. (A look at a file when it is empty.)
            if not await self._flushed():
                raise StorageUnavailable(self.away or "memory server not answering")
            return await self._call(name, *args, **kwargs)

        return call

    def _ended(self, call: asyncio.Future[Any]) -> None:
        self.given_up.discard(call)
        if not call.cancelled() and call.exception() is not None:
            log.debug("a call given up on ended with: %s", call.exception())

    async def _refusal(self, *args: Any, **kwargs: Any) -> Any:
        raise StorageUnavailable(self.away or "memory server not answering")

    def _refused(self, *args: Any, **kwargs: Any) -> Any:
        raise StorageUnavailable(self.away or "memory server not answering")

    def _silent(self) -> bool:
        """Whether the server did not answer lately, and is not to be asked (see _answer)."""
        return bool(self.away) and time.monotonic() < self._silent_until

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
            self._store = None

    async def keep_alive(self) -> int:
        """Open the server store if it is not, and replay the outbox; the writes sent."""
        await self._answer("get_meta", "profile_summary", probe=True)  # connected, answering
        return await self.replay()

    async def replay(self) -> int:
        """Send what the outbox holds to the server, in order; the number sent. Stops at the
        first write the server cannot take yet (the rest waits for the next try)."""
        async with self._lock:
            try:
                return await self._replay()
            except StorageUnavailable as exc:
                self.kept_why = str(exc)
                raise

    async def _replay(self) -> int:
        sent = 0
        for row in await self.outbox.pending():
            if row["kind"] == "session":
                title = row["title"] and await self._answer(
                    "redact_forgotten_since", row["title"], BEFORE_ANY_FORGET
                )
                with contextlib.suppress(InvalidInput):  # already there: an earlier replay
                    await self._answer(
                        "create_session", title, session_id=row["session_id"], at=row["at"]
                    )
            elif not await self._already_sent(row):
                await self._send(row)
            await self.outbox.done(row["seq"])
            sent += 1
        self.kept_why = None
        if sent:
            log.info("memory server back: %d kept writes sent", sent)
        return sent

    async def _send(self, row: Any) -> None:
        meta = json.loads(row["meta"]) if row["meta"] else None
        # Perhaps said before a forget made meanwhile on another machine: it arrives without
        # it (its text and its meta, such as a tool call's arguments).
        args = ("save_message", row["session_id"], row["role"], row["content"])
        kwargs = {"name": row["name"], "at": row["at"], "meta": meta, "said_at": BEFORE_ANY_FORGET}
        try:
            await self._answer(*args, **kwargs)
        except NotFound:  # its session was deleted meanwhile (another machine): kept anyway
            await self._answer("create_session", session_id=row["session_id"], at=row["at"])
            await self._answer(*args, **kwargs)

    async def _already_sent(self, row: Any) -> bool:
        """Whether an earlier replay stored this message and stopped before crossing it out:
        its role and time, and its text as sent (redacted, if a forget came meanwhile)."""
        recent = await self._answer("messages", row["session_id"], last=20)
        same = [m for m in recent if (m.role, m.created_at) == (row["role"], row["at"])]
        if not same:
            return False
        redacted = await self._answer("redact_forgotten_since", row["content"], BEFORE_ANY_FORGET)
        return any(m.content in (row["content"], redacted) for m in same)

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
        # Named before the server is asked: a call whose answer was lost is replayed as the
        # same session (already there), not a second one.
        sid = session_id or uuid.uuid4().hex[:12]
        when = check_iso(at, "at") if at else now_iso()
        if await self._flushed():
            try:
                return await self._answer("create_session", title, session_id=sid, at=when)
            except StorageUnavailable as exc:
                log.warning("keeping a new session locally: %s", exc)
                self.kept_why = str(exc)
        async with self._lock:
            await self.outbox.add("session", sid, title=title, at=when)
        return Session(sid, title, when, when, "open", 0, None, None)

    async def get_session(self, session_id: str) -> Session:
        try:
            return await self._answer("get_session", session_id)
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
        said_at: str | None = None,
    ) -> Message:
        if role not in ROLES:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        # Timed before the server is asked: a message stored whose answer was lost is known
        # by its time when replayed (_already_sent), not stored twice.
        when = check_iso(at, "at") if at else now_iso()
        if await self._flushed():
            try:
                return await self._answer(
                    "save_message",
                    session_id,
                    role,
                    content,
                    name=name,
                    at=when,
                    meta=meta,
                    said_at=said_at,
                )
            except StorageUnavailable as exc:
                log.warning("keeping a message locally: %s", exc)
                self.kept_why = str(exc)
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
        answering = await self._flushed()  # False: the server was just tried, and is away
        kept = [
            _message(r)
            for r in await self.outbox.pending()
            if r["kind"] == "message" and r["session_id"] == session_id
        ]
        stored = []
        if answering:
            with contextlib.suppress(StorageUnavailable):
                stored = await self._answer("messages", session_id, after_id=after_id, last=last)
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

    async def pending_status(self, open_ids: Any = ()) -> tuple[int, str | None]:
        # The server away is the profile's own error in daemon.status (daemon/remote.py).
        return await self._or_nothing("pending_status", (0, None), open_ids)

    async def _or_nothing(self, method: str, nothing: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._answer(method, *args, **kwargs)
        except StorageUnavailable as exc:
            log.warning("%s without the memory server: %s", method, exc)
            return nothing

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``method`` of the server store; whether the server answers is kept in ``away``.
        A conflict with another writer is tried again (RETRIES in all), a dropped connection
        once on a new one: the server rolled the call's change back. Not a message: one whose
        COMMIT was cut off may be stored, and the outbox's replay knows it (_already_sent)."""
        tries = 0
        while True:
            tries += 1
            try:
                return await self._try(method, *args, **kwargs)
            except StorageUnavailable as exc:
                code = sqlstate(exc) or ""
                lost = code.startswith(("08", "57P")) and method != "save_message"
                again = tries < RETRIES if code in CONFLICTS else lost and tries == 1
                if not again:
                    raise
                log.info("%s tried again: %s", method, exc)

    async def _try(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            result = await getattr(await self.server(), method)(*args, **kwargs)
        except StorageUnavailable as exc:
            self.away = str(exc)
            if _timed_out(exc):  # a wait, not a refusal: the next calls are spared it
                self._silent_until = time.monotonic() + self.SILENT_S
            raise
        self.away = None
        return result

    async def _answer(self, method: str, *args: Any, probe: bool = False, **kwargs: Any) -> Any:
        """``_call`` for a chat turn and the replay: a server that does not answer within
        ``ANSWER_S`` is away, and is not asked again for ``SILENT_S`` unless ``probe`` (long
        work such as an import goes through ``_call`` unbounded)."""
        if not probe and self._silent():
            raise StorageUnavailable(self.away or "memory server not answering")
        # The call runs as its own task, and one that does not answer is cancelled and left
        # to finish on its own: asyncpg's clean-up of a cancelled query waits, shielded, for
        # the server to acknowledge the cancel, which a frozen server never does (a turn
        # timed out in place took a minute, not ANSWER_S).
        call = asyncio.ensure_future(self._call(method, *args, **kwargs))
        try:
            done, _ = await asyncio.wait({call}, timeout=self.ANSWER_S)
        except asyncio.CancelledError:
            call.cancel()
            raise
        if done:
            result = call.result()
        else:
            call.cancel()
            self.given_up.add(call)
            call.add_done_callback(self._ended)
            where = self._store.where if self._store is not None else "(connecting)"
            self.away = (
                f"memory server {where} did not answer within {self.ANSWER_S:g} s: check that"
                " it is running and reachable"
            )
            self._silent_until = time.monotonic() + self.SILENT_S
            raise StorageUnavailable(self.away)
        self._silent_until = 0.0
        return result
