"""One message in the transcript. Replies stream into their Markdown through a
``ReplyStream`` (stream.py): at most one update a frame, in parts whose cost does not grow
with the reply, and a last update of the live part at the end (it closes open code fences).

Textual's Markdown widget (and markdown-it under it) is imported with the first message, not
with the app: it was a tenth of the time to the first frame, which shows no message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Label

from navi_desktop.tui.garbage import full_collections
from navi_desktop.tui.widgets.growing import Growing

if TYPE_CHECKING:
    from navi_desktop.tui.chat.stream import ReplyStream

ROLE_LABEL = {"user": "You", "assistant": "Navi"}


def note_label(text: str) -> Label:
    """A line under a message ("(stopped)", an error): wrapped, never cut (an error's fix
    comes last), and shown as written (an error may hold brackets)."""
    return Label(text, classes="note", markup=False)


class Transcript(VerticalScroll, Growing):
    """The chat's messages. Its lines stay drawn while a reply makes its content grow."""


class UsedLink(Label, can_focus=True):
    """The "what did you use?" line under a reply: click it, or focus it and press Enter."""

    BINDINGS = [Binding("enter", "open", "What did you use?", show=False)]

    def on_click(self, event: events.Click) -> None:
        event.stop()
        self.action_open()

    def action_open(self) -> None:
        view = next(a for a in self.ancestors if isinstance(a, MessageView))
        view.action_used()


class MessageView(Vertical, Growing, can_focus=True):
    DEFAULT_CSS = """
    MessageView { height: auto; padding: 0 1; margin-bottom: 1; }
    MessageView:focus { background: $boost; }
    MessageView .role { text-style: bold; color: $accent; }
    MessageView.-user .role { color: $secondary; }
    MessageView Markdown { margin: 0; padding: 0; }
    UsedLink { color: $text-muted; text-style: underline; width: auto; }
    UsedLink:hover, UsedLink:focus { color: $text; background: $boost; }
    MessageView .note { color: $text-muted; width: 1fr; }
    """
    BINDINGS = [
        Binding("c", "copy", "Copy message", id="navi.message.copy"),
        Binding("u", "used", "What did you use?", id="navi.message.used"),
    ]

    class UsedRequested(Message):
        def __init__(self, view: MessageView) -> None:
            super().__init__()
            self.view = view

    def __init__(
        self,
        role: str,
        text: str = "",
        *,
        user_message_id: int | None = None,
        injected: int | None = None,
        note: str | None = None,
    ) -> None:
        super().__init__(classes=f"-{role}")
        self.role = role
        self.text = text
        self.user_message_id = user_message_id  # the turn's user message: the ledger's key
        self.injected = injected
        self.note = note
        self._stream: ReplyStream | None = None

    def compose(self) -> ComposeResult:
        from textual.widgets import Markdown

        from navi_desktop.tui.chat.stream import ReplyPart

        yield Label(ROLE_LABEL.get(self.role, self.role), classes="role")
        if self.role == "user":  # what was typed, line breaks kept (Markdown would join them)
            yield Markdown(self.text.replace("\n", "  \n"))
        else:
            yield ReplyPart(self.text or "…")
        if self.note:
            yield note_label(self.note)

    @property
    def source(self) -> str:
        """The Markdown on screen: a long streamed reply's parts, joined."""
        from textual.widgets import Markdown

        return "".join(part.source for part in self.query_children(Markdown))

    # -- streaming -----------------------------------------------------------------------------

    async def begin_stream(self) -> None:
        from navi_desktop.tui.chat.stream import ReplyPart, ReplyStream

        self.text = ""
        first = self.query_one(ReplyPart)
        await first.update("")
        self._stream = ReplyStream(self, first)
        self._stream.start()

    async def write(self, fragment: str) -> None:
        """Take a delta at once; the Markdown shows it with the next frame."""
        if self._stream is None:
            return
        self.text += fragment
        self._stream.write(fragment)

    async def finish(
        self,
        text: str,
        *,
        user_message_id: int | None = None,
        injected: int | None = None,
        note: str | None = None,
    ) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.finish(text)
        else:
            from navi_desktop.tui.chat.stream import ReplyPart

            part = self.query_one(ReplyPart)
            part.reopen()
            await part.update(text or "*(no reply)*")
        self.text = text
        self.user_message_id = user_message_id
        self.injected = injected
        if note:
            await self.mount(note_label(note))
        await self.add_used_link()

    async def show_rating(self, text: str) -> None:
        """The rating line under a reply; a new rating replaces the old line."""
        await self.query_children(".rating").remove()
        label = note_label(text)
        label.add_class("rating")
        await self.mount(label)

    async def add_used_link(self) -> None:
        wanted = self.role == "assistant" and self.user_message_id is not None
        if wanted and not self.query_children(UsedLink):
            count = f" ({self.injected})" if self.injected is not None else ""
            await self.mount(UsedLink(f"what did you use?{count}"))

    async def on_mount(self) -> None:
        if self.role == "assistant" and self.text:  # a finished reply: it may fold when far
            from navi_desktop.tui.chat.stream import ReplyPart

            self.query_one(ReplyPart).seal(self.text)
        await self.add_used_link()

    def on_unmount(self) -> None:
        if self._stream is not None:  # removed mid-reply (the app quit): its task ends too
            self._stream.cancel()
        full_collections.settle()  # the app may quit before the collection after a reply

    # -- actions -------------------------------------------------------------------------------

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.text)
        self.notify("Message copied to the clipboard")

    def action_used(self) -> None:
        if self.user_message_id is None:
            self.notify("Nothing was recorded for this message", severity="warning")
            return
        self.post_message(self.UsedRequested(self))
