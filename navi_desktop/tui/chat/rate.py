"""Rating the last reply: good or bad, with an optional note (``chat.rate``).

The memories a badly rated reply used are flagged for review in the inspector; nothing is
changed because of a rating.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Static

from navi_desktop.tui.dialogs import Dialog
from navi_desktop.tui.widgets.ordered import OrderedInput

if TYPE_CHECKING:
    from navi_desktop.tui.chat.screen import ChatScreen

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


class RatingActions:
    """The chat screen's part: F11 rates the last reply; a reopened session shows its
    ratings under the replies they rate."""

    @work(exclusive=True, group="rate", exit_on_error=False)
    async def action_rate_reply(self: ChatScreen) -> None:
        last = self._last_reply()
        if last is None or self.answering or self.session_id is None:
            return
        answer = await self.app.push_screen_wait(RateScreen())
        if answer is None or last is not self._last_reply():
            return
        rating, note = answer
        params = {"session_id": self.session_id, "rating": rating, "note": note}
        try:
            result = await self.navi.link.call("chat.rate", params)
        except Exception as err:
            self.navi.report(err, "Rating the reply")
            return
        await last.show_rating(rated_note(result))
        if rating == "down" and not result.get("incognito"):
            if last.injected == 0:
                self.notify("It used no memory, so nothing is flagged.")
            else:
                self.notify("The memories it used are flagged for review in Memory (F3).")

    async def _show_ratings(self: ChatScreen, session_id: str) -> None:
        """Mark the rated replies of a session just shown."""
        try:
            found = await self.navi.link.call("chat.ratings", {"session_id": session_id})
        except Exception:  # the transcript is shown; its ratings are a detail
            return
        by_turn = {r["turn_id"]: r for r in found.get("ratings", []) if r.get("turn_id")}
        for view in self._views():
            if view.role == "assistant" and (rating := by_turn.get(view.user_message_id)):
                await view.show_rating(rated_note(rating))
