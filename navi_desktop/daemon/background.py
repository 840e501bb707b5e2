"""Background model work that never gets in the user's way.

On a local Ollama one model serves both the chat and the session ends, one request at a time:
a session end's request in flight when the user sends a message would hold up the reply for as
long as it takes (minutes on a CPU). So every background request waits until no reply is being
written (and, for work the user did not ask for, until the user has been quiet a moment), and
when a reply starts while one is in flight, that request is cancelled (closing its connection
makes Ollama stop) and sent again once the reply is done. A session end commits chunk by chunk,
so what it finished before the pause is kept.

Progress (chunk i of n, or waiting for the user) is announced as it changes, at most once a
second per daemon: a fast model can finish chunks many times a second, a slow one takes
minutes per chunk, and clients (the TUI's status line) should follow both without polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

from navi_desktop.pipeline.session_end import EndSettings

T = TypeVar("T")


class IdleGate:
    """Knows whether the user is being answered, and since when they have been quiet."""

    def __init__(self, quiet_s: float = 2.0) -> None:
        self.quiet_s = quiet_s
        self.pauses = 0  # background requests cancelled for a reply, since start
        self._turns = 0
        self._last_turn = -float("inf")
        self._changed = asyncio.Event()

    def touch(self) -> None:
        """The user did something (e.g. started a new chat): quiet work waits a moment more."""
        self._last_turn = max(self._last_turn, time.monotonic())
        self._signal()

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Around every chat turn: background requests stand aside until it is over."""
        self._turns += 1
        self._signal()
        try:
            yield
        finally:
            self._turns -= 1
            self._last_turn = time.monotonic()
            self._signal()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _quiet_left(self, quiet: bool) -> float:
        return self._last_turn + self.quiet_s - time.monotonic() if quiet else 0.0

    def idle(self, quiet: bool) -> bool:
        return not self._turns and self._quiet_left(quiet) <= 0

    async def wait_idle(self, quiet: bool) -> None:
        """Until no turn runs (and, with ``quiet``, none ended in the last ``quiet_s``)."""
        while True:
            changed = self._changed
            if self._turns:
                await changed.wait()
                continue
            left = self._quiet_left(quiet)
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), left)

    async def wait_busy(self) -> None:
        """Until a turn starts."""
        while not self._turns:
            await self._changed.wait()


class PoliteModel:
    """A model backend (``complete_json``, ``complete_json_loose``, ``context_length``) whose
    requests give way to chat turns through ``gate``. ``quiet``: also wait for the user to be
    quiet (work they did not ask for); False for an explicit end, which still gives way.
    ``on_wait(True/False)``: told when a request starts waiting and when it goes ahead."""

    def __init__(
        self,
        backend: Any,
        gate: IdleGate,
        *,
        quiet: bool = True,
        on_wait: Callable[[bool], None] | None = None,
    ) -> None:
        self.backend = backend
        self.gate = gate
        self.quiet = quiet
        self.on_wait = on_wait or (lambda waiting: None)

    async def context_length(self, model: str) -> int | None:
        lookup = getattr(self.backend, "context_length", None)
        return await lookup(model) if lookup is not None else None

    async def complete_json(self, *args: Any, **kwargs: Any) -> Any:
        return await self._polite(lambda: self.backend.complete_json(*args, **kwargs))

    async def complete_json_loose(self, *args: Any, **kwargs: Any) -> Any:
        return await self._polite(lambda: self.backend.complete_json_loose(*args, **kwargs))

    async def _polite(self, make: Callable[[], Awaitable[T]]) -> T:
        while True:
            if not self.gate.idle(self.quiet):
                self.on_wait(True)
                await self.gate.wait_idle(self.quiet)
                self.on_wait(False)
            call = asyncio.ensure_future(make())
            arrived = asyncio.ensure_future(self.gate.wait_busy())
            try:
                await asyncio.wait({call, arrived}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                arrived.cancel()
                if not call.done():
                    call.cancel()
                    await asyncio.gather(call, return_exceptions=True)
            if not call.cancelled():
                return call.result()
            self.gate.pauses += 1


class Throttle:
    """Calls ``send`` after a change, at most once every ``every_s``: a change within that
    time is sent at its end. ``send`` reads the state when it runs, so the last one always
    goes out (a finished session end is never left showing as running)."""

    def __init__(
        self,
        send: Callable[[], Awaitable[object]],
        every_s: float = 1.0,
        spawn: Callable[[Awaitable[Any]], object] = asyncio.ensure_future,
    ) -> None:
        self.send = send
        self.every_s = every_s
        self.spawn = spawn
        self._due = False  # a send is scheduled and has not read the state yet
        self._last = -float("inf")

    def poke(self) -> None:
        if not self._due:
            self._due = True
            self.spawn(self._send_later())

    async def _send_later(self) -> None:
        try:
            await asyncio.sleep(max(0.0, self._last + self.every_s - time.monotonic()))
        finally:
            self._due = False  # a change from here on schedules the next send
        self._last = time.monotonic()
        await self.send()


class SessionEnds:
    """The session ends under way, each with a :class:`PoliteModel` and its progress (chunk
    i of n, or waiting for the user to be idle), for ``daemon.status``. ``on_change`` is
    called whenever that list changes (an end starts, moves on, waits, or finishes)."""

    # Ends the user did not ask for, and that may start while they are active, also wait
    # until the user has been quiet a moment (after inactivity they have been for minutes).
    QUIET_TRIGGERS = frozenset({"new session", "recovery", "retry"})

    def __init__(self, gate: IdleGate, on_change: Callable[[], None] | None = None) -> None:
        self.gate = gate
        self.running: dict[tuple[str, str], dict[str, Any]] = {}
        self.on_change = on_change or (lambda: None)

    @contextlib.contextmanager
    def track(
        self, profile: str, session_id: str, trigger: str, backend: Any, settings: EndSettings
    ) -> Iterator[tuple[PoliteModel, EndSettings]]:
        state: dict[str, Any] = {
            "profile": profile,
            "session_id": session_id,
            "trigger": trigger,
            "chunk": 0,
            "chunks": 0,
            "waiting": False,
        }
        if trigger == "new session":
            self.gate.touch()  # spawned while the user's first message is being answered

        def progress(chunk: int, chunks: int) -> None:
            state.update(chunk=chunk, chunks=chunks)
            self.on_change()

        def on_wait(waiting: bool) -> None:
            state["waiting"] = waiting
            self.on_change()

        model = PoliteModel(
            backend, self.gate, quiet=trigger in self.QUIET_TRIGGERS, on_wait=on_wait
        )
        self.running[(profile, session_id)] = state
        self.on_change()
        try:
            yield model, replace(settings, progress=progress)
        finally:
            self.running.pop((profile, session_id), None)
            self.on_change()

    def status(self) -> list[dict[str, Any]]:
        return [dict(s) for s in self.running.values()]
