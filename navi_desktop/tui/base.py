"""What every Navi screen shares: the problem banner on top, the status line and the key
footer below, incognito's colour, daemon notifications delivered to ``on_event``, and typing
drawn ahead of other frames (frames.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult

from navi_desktop.tui.frames import InputFirst
from navi_desktop.tui.status import Status
from navi_desktop.tui.widgets.footer import Footer
from navi_desktop.tui.widgets.status_line import Banner, StatusLine

if TYPE_CHECKING:
    from navi_desktop.tui.app import NaviApp


class NaviScreen(InputFirst):
    SHOWS_CONFIG_ERRORS = False  # the settings screen lists them itself, beside the fields

    @property
    def navi(self) -> NaviApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Banner()
        yield from self.compose_body()
        yield StatusLine()
        yield Footer()

    def compose_body(self) -> ComposeResult:
        yield from ()

    def on_mount(self) -> None:
        # Textual calls every class's on_mount itself: subclasses must not call super(), or
        # every notification would arrive twice.
        self.navi.event_signal.subscribe(self, self._event)
        self.navi.status_signal.subscribe(self, self._status)
        self._status(self.navi.status)

    def _status(self, status: Status) -> None:
        self.set_class(status.incognito, "-incognito")

    async def _event(self, event: tuple[str, Any]) -> None:
        await self.on_daemon(*event)

    async def on_daemon(self, method: str, params: Any) -> None:
        """A daemon notification (or ``link.state``); screens override what they need."""

    def action_focus_main(self) -> None:
        """Focus the field a user of this screen types into first (F2 and friends)."""
