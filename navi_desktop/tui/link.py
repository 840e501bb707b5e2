"""The TUI's one connection to the daemon (no Textual here, so it is testable alone).

It starts the daemon when none answers, subscribes to the notification topics, hands every
notification to ``on_event`` and every change of connection state to ``on_state``, and
reconnects when the daemon goes away. Calls made while disconnected fail at once with a
message that says what is wrong, so the UI never hangs on a dead socket.

Every string that comes in (answers, notifications, errors) has its control characters
replaced (``DaemonClient.safe_text``, terminal_text.py): the app shows replies, memories and
titles as they are, and Textual would pass an escape sequence in them on to the terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from navi_desktop.daemon.client import DaemonClient, NotConnected
from navi_desktop.errors import NaviError
from navi_desktop.paths import Paths
from navi_desktop.terminal_text import safe

TOPICS = ("memory", "sessions", "settings", "ollama")
RETRY_S = (0.5, 1.0, 2.0, 5.0)  # backoff between reconnects; the last one repeats


@dataclass(frozen=True)
class LinkState:
    state: str  # "connecting", "up" or "down"
    detail: str | None = None  # why it is down, and what to do


class DaemonLink:
    def __init__(
        self,
        paths: Paths,
        *,
        profile: str | None,
        on_event: Callable[[str, Any], None],
        on_state: Callable[[LinkState], None],
        autostart: bool = True,
    ) -> None:
        self.paths = paths
        self.profile = profile
        self._on_event = on_event
        self._on_state = on_state
        self._autostart = autostart
        self._client: DaemonClient | None = None
        self.state = LinkState("connecting")
        self._wake = asyncio.Event()
        self._restart = False  # start() was called: the next try starts a daemon

    @property
    def connected(self) -> bool:
        return self._client is not None and not self._client.closed

    async def run(self) -> None:
        """Stay connected until cancelled."""
        failures = 0
        stopped: str | None = None  # why the daemon went away, while the user has not restarted it
        while True:
            try:
                # A daemon that went away is not started again behind the user's back
                # (`navi daemon stop` meant it); another one that starts is joined.
                self._client = await self._connect(self._autostart and stopped is None)
                await self._client.subscribe(*TOPICS)
            except NaviError as err:
                self._set(LinkState("down", stopped or str(err)))
                await self._pause(RETRY_S[min(failures, len(RETRY_S) - 1)])
                failures += 1
                continue
            failures, stopped = 0, None
            self._set(LinkState("up"))
            try:
                async for note in self._client.notifications():
                    self._on_event(note.method, note.params)
            finally:
                client, self._client = self._client, None
                with contextlib.suppress(Exception):
                    await client.close()
            stopped = gone(self.paths)
            self._set(LinkState("down", stopped))
            await self._pause(RETRY_S[0])

    async def _pause(self, seconds: float) -> None:
        """Wait before the next try; ``start()`` cuts the wait short."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        if self._wake.is_set():
            self._wake.clear()

    def start(self) -> None:
        """Start the daemon now (the user asked): the next try may start it."""
        self._restart = True
        self._wake.set()

    async def _connect(self, autostart: bool) -> DaemonClient:
        from navi_desktop.daemon.main import connect

        if self._restart:
            autostart, self._restart = True, False
        client = await connect(
            self.paths,
            timeout=2.0,
            autostart=autostart,
            on_start=lambda: self._set(LinkState("connecting", "starting the Navi daemon…")),
        )
        client.safe_text = True
        return client

    def _set(self, state: LinkState) -> None:
        if state.detail is not None:
            state = LinkState(state.state, safe(state.detail))
        if state != self.state:
            self.state = state
            self._on_state(state)

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> Any:
        """Call the daemon; the profile is added to every call when one was chosen."""
        client = self._client
        if client is None or client.closed:
            detail = self.state.detail or "the daemon is not connected yet"
            raise NotConnected(f"no connection to the Navi daemon: {detail}")
        params = dict(params or {})
        if self.profile and "profile" not in params:
            params["profile"] = self.profile
        return await client.call(method, params, timeout=timeout)

    async def memory(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A ``memory.*`` call with the store method's own arguments."""
        return await self.call(f"memory.{method}", {"args": list(args), "kwargs": kwargs})

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if self._client is not None:
            await self._client.notify(method, params)


def gone(paths: Paths) -> str:
    """Why the daemon is down once it went away: stopped on purpose or ended, the app cannot
    tell (a killed daemon says nothing), so both are said, and where to look."""
    return (
        f"it is no longer running (stopped, or it ended: {paths.daemon_log} says why);"
        " Alt+G starts it again (or `navi daemon start`)"
    )
