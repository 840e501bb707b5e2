"""Rating the last reply: good or bad, with an optional note (``chat.rate``).

The memories a badly rated reply used are flagged for review in the inspector; nothing is
changed because of a rating.
"""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Static

from navi_desktop.tui.dialogs import Dialog
from navi_desktop.tui.widgets.ordered import OrderedInput

MAX_NOTE = 2000  # the daemon's limit (memory/feedback.py)


def rated_note(rating: dict[str, Any]) -> str:
    """The line under a rated reply."""
    word = "good" if rating.get("rating") == "up" else "bad"
    note = rating.get("note")
    return f"(rated {word}{': ' + note if note else ''})"


class RateScreen(Dialog):
    """Answers ``("up" | "down", note or None)``, or None (Esc, Cancel)."""

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Rate this reply", classes="title")
            yield Static(
                "A bad rating flags the memories this reply used, for you to review in"
                " Memory. Nothing is changed by it.",
            )
            yield OrderedInput(placeholder="What was wrong or right? (optional)", id="note")
            yield Static("", classes="error", id="error")
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button("Bad", id="down", variant="error")
                yield Button("Good", id="up", variant="success")

    def on_mount(self) -> None:
        self.query_one("#note", Input).focus()

    @on(Button.Pressed, "#up")
    @on(Button.Pressed, "#down")
    def _rated(self, event: Button.Pressed) -> None:
        note = self.query_one("#note", Input).value.strip()
        if len(note) > MAX_NOTE:
            self.query_one("#error", Static).update(
                f"The note is {len(note)} characters; at most {MAX_NOTE}."
            )
            return
        self.dismiss((event.button.id, note or None))  # type: ignore[arg-type]

    @on(Input.Submitted)
    def _submitted(self) -> None:
        # Enter in the note does not choose for the user: it moves to the buttons.
        self.query_one("#down", Button).focus()

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)
