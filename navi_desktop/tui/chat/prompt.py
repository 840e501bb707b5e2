"""The multi-line prompt: Enter sends; Ctrl+J inserts a newline in every terminal (it is the
line-feed byte itself), and Shift+Enter / Alt+Enter do too where the terminal reports them.
Its keys (Enter and Backspace included) run in the order they were typed, even in a burst
(see widgets/ordered.py): a paste of keys is never cut or reordered."""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message

from navi_desktop.tui.widgets.ordered import OrderedTextArea


class Prompt(OrderedTextArea):
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
        # TextArea's F6/F7 (select line / all) would shadow the chat's copy and rename keys.
        for key in ("f6", "f7"):
            self._bindings.key_to_bindings.pop(key, None)

    def action_submit(self) -> None:
        text = self.text.strip()
        if text:
            self.post_message(self.Submitted(text))
            self.clear()

    def action_newline(self) -> None:
        self.insert("\n")
