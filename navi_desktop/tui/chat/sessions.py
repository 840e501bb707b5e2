"""The sessions list beside the chat: search (titles, then the words said), pick one."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, OptionList
from textual.widgets.option_list import Option

from navi_desktop.limits import MAX_QUERY, SEARCH, too_long_sentence
from navi_desktop.tui import timefmt
from navi_desktop.tui.timefmt import ago
from navi_desktop.tui.widgets.ordered import OrderedInput


def short(text: str | None) -> str | None:
    """A line to name a session by: the first line, cut at a word near 50 characters."""
    if not text or not text.strip():
        return None
    line = text.strip().splitlines()[0]
    return line if len(line) <= 50 else line[:50].rsplit(" ", 1)[0] + "…"


def label(session: dict[str, Any]) -> str | None:
    """Its title, else what the user said first. Not stored as a title: forgetting redacts
    the message, and the list follows."""
    return session.get("title") or short(session.get("preview"))


class SessionsPane(Vertical):
    DEFAULT_CSS = """
    SessionsPane { width: 30; border-right: solid $panel-lighten-2; }
    SessionsPane Input { margin: 0; }
    SessionsPane OptionList { height: 1fr; border: none; }
    """

    class Picked(Message):
        def __init__(self, session_id: str) -> None:
            super().__init__()
            self.session_id = session_id

    class Loaded(Message):
        """The list has the daemon's sessions as they are now (titles renamed elsewhere)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.sessions: list[dict[str, Any]] = []
        self.current: str | None = None
        self._shown: list[dict[str, Any]] = []  # the sessions listed now

    def compose(self) -> ComposeResult:
        yield OrderedInput(placeholder="Search sessions", id="session-search")
        yield OptionList(id="sessions")

    @work(exclusive=True, group="sessions", exit_on_error=False)
    async def reload(self) -> None:
        link = self.app.link  # type: ignore[attr-defined]
        try:
            self.sessions = await link.call("sessions.list", {"limit": 200})
        except Exception:
            return  # the banner says why the daemon cannot answer
        self.post_message(self.Loaded())
        query = self.query_one("#session-search", Input).value.strip()
        if line := too_long_sentence(query, MAX_QUERY, SEARCH):
            self._say(line)  # said here, not searched: the daemon would refuse it
            return
        shown = self.sessions
        if query:
            shown = await self._matching(query)
        self._fill(shown)
        if query and not shown:
            self._say("No session matches this search.")

    def _say(self, line: str) -> None:
        """A line in place of the list: why it is empty (never an empty list unexplained)."""
        self._shown = []
        options = self.query_one("#sessions", OptionList)
        options.clear_options()
        options.add_option(Option(Text(line, style="dim"), disabled=True))

    def on_mount(self) -> None:
        self.set_interval(timefmt.RETIME_S, self._retime)

    def _retime(self) -> None:
        """Redraw the rows' times ("now" becomes "5m") without asking the daemon again."""
        if self._shown:
            self._fill(self._shown)

    def _fill(self, shown: list[dict[str, Any]]) -> None:
        self._shown = shown
        options = self.query_one("#sessions", OptionList)
        highlighted = options.highlighted
        options.clear_options()
        for s in shown:
            text = Text(label(s) or "New chat", overflow="ellipsis", no_wrap=True)
            state = "" if s.get("state") in (None, "open") else f" · {s['state']}"
            text.append(f"\n{ago(s.get('last_active_at'))}{state}", style="dim")
            options.add_option(Option(text, id=s["id"]))
        ids = [s["id"] for s in shown]
        if ids:
            place = highlighted if highlighted is not None and highlighted < len(ids) else 0
            options.highlighted = ids.index(self.current) if self.current in ids else place

    async def _matching(self, query: str) -> list[dict[str, Any]]:
        """Sessions whose title holds the words, then those whose messages match them."""
        lowered = query.lower()
        by_title = [s for s in self.sessions if lowered in (label(s) or "").lower()]
        try:
            hits = await self.app.link.memory("search", query, kinds=["message"], limit=50)  # type: ignore[attr-defined]
        except Exception:
            hits = []
        said = {h["message"]["session_id"] for h in hits if h.get("message")}
        rest = [s for s in self.sessions if s["id"] in said and s not in by_title]
        return by_title + rest

    @on(Input.Changed, "#session-search")
    def _search(self) -> None:
        self.reload()

    @on(OptionList.OptionSelected, "#sessions")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id:
            self.post_message(self.Picked(event.option.id))

    def title_of(self, session_id: str | None) -> str | None:
        return next((label(s) for s in self.sessions if s["id"] == session_id), None)
