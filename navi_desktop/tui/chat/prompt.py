"""The multi-line prompt: Enter sends; Ctrl+J inserts a newline in every terminal (it is the
line-feed byte itself), and Shift+Enter / Alt+Enter do too where the terminal reports them."""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea


class Prompt(TextArea):
    DEFAULT_CSS = """
    Prompt { height: auto; min-height: 3; max-height: 10; border: round $primary 50%; }
    Prompt:focus { border: round $primary; }
    """
    BINDINGS = [
        Binding("enter", "submit", "Send", id="navi.prompt.send"),
        Binding("ctrl+j,shift+enter,alt+enter", "newline", "Newline", id="navi.prompt.newline"),
    ]

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, **kw: object) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, **kw)  # type: ignore[arg-type]

    async def _on_key(self, event: events.Key) -> None:
        # Handled here, in the prompt's own queue, not as app-level priority bindings: those
        # run before the keys typed just ahead of them arrive, and a fast paste would be cut.
        for action in ("submit", "newline"):
            if event.key in self._keys_for(action):
                event.stop()
                event.prevent_default()
                await self.run_action(action)
                return
        await super()._on_key(event)

    def _keys_for(self, action: str) -> set[str]:
        """The keys bound to ``action`` now (the user's keymap included)."""
        return {
            key
            for key, bindings in self._bindings.key_to_bindings.items()
            if any(b.action == action for b in bindings)
        }

    def action_submit(self) -> None:
        text = self.text.strip()
        if text:
            self.post_message(self.Submitted(text))
            self.clear()

    def action_newline(self) -> None:
        self.insert("\n")
