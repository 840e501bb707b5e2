"""The multi-line prompt: Enter sends; Ctrl+J inserts a newline in every terminal (it is the
line-feed byte itself), and Shift+Enter / Alt+Enter do too where the terminal reports them."""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea


class Prompt(TextArea):
    DEFAULT_CSS = """
    Prompt { height: auto; min-height: 3; max-height: 10; border: round $primary 50%; }
    Prompt:focus { border: round $primary; }
    """
    BINDINGS = [
        Binding("enter", "submit", "Send", id="navi.prompt.send", priority=True),
        Binding(
            "ctrl+j,shift+enter,alt+enter",
            "newline",
            "Newline",
            id="navi.prompt.newline",
            priority=True,
        ),
    ]

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, **kw: object) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, **kw)  # type: ignore[arg-type]

    def action_submit(self) -> None:
        text = self.text.strip()
        if text:
            self.post_message(self.Submitted(text))
            self.clear()

    def action_newline(self) -> None:
        self.insert("\n")
