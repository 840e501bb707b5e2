"""Background model work that never gets in the user's way.

On a local Ollama one model serves both the chat and the session ends, one request at a time:
a session end's request in flight when the user sends a message would hold up the reply for as
long as it takes (minutes on a CPU). So every background request waits until no reply is being
written (and, for work the user did not ask for, until the user has been quiet a moment), and
when a reply starts while one is in flight, that request is cancelled (closing its connection
makes Ollama stop) and sent again once the reply is done. A session end commits chunk by chunk,
so what it finished before the pause is kept.
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


class SessionEnds:
    """The session ends under way, each with a :class:`PoliteModel` and its progress (chunk
    i of n, or waiting for the user to be idle), for ``daemon.status``."""

    # Ends the user did not ask for, and that may start while they are active, also wait
    # until the user has been quiet a moment (after inactivity they have been for minutes).
    QUIET_TRIGGERS = frozenset({"new session", "recovery", "retry"})

    def __init__(self, gate: IdleGate) -> None:
        self.gate = gate
        self.running: dict[tuple[str, str], dict[str, Any]] = {}

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

        def on_wait(waiting: bool) -> None:
            state["waiting"] = waiting

        model = PoliteModel(
            backend, self.gate, quiet=trigger in self.QUIET_TRIGGERS, on_wait=on_wait
        )
        self.running[(profile, session_id)] = state
        try:
            yield model, replace(settings, progress=progress)
        finally:
            self.running.pop((profile, session_id), None)

    def status(self) -> list[dict[str, Any]]:
        return [dict(s) for s in self.running.values()]
