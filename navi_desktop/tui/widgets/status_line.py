"""The one-line status bar and the problem banner, both drawn from the app's ``Status``."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from navi_desktop.tui.status import Learning, Status


class StatusLine(Static):
    DEFAULT_CSS = """
    StatusLine { height: 1; background: $panel; color: $text-muted; padding: 0 1; }
    StatusLine.-incognito { background: $error; color: $text; }
    """
    _shown: Text | None = None

    def on_mount(self) -> None:
        self.app.status_signal.subscribe(self, self.show)  # type: ignore[attr-defined]
        self.show(self.app.status)  # type: ignore[attr-defined]

    def show(self, status: Status) -> None:
        self._last = status
        self.set_class(status.incognito, "-incognito")
        text = render_status(status, self.size.width or self.app.size.width)
        if text != self._shown:  # the status changes with every memory change, this line less
            self._shown = text
            self.update(text, layout=False)  # one line whatever it says: no layout of the screen

    def on_resize(self) -> None:
        if hasattr(self, "_last"):
            self.show(self._last)


def render_status(s: Status, width: int = 1000) -> Text:
    """The status as it fits ``width``: the details go first (the host, then words, then a
    daemon that answers, then the words of a session end's progress), the profile and
    incognito stay."""
    for short in range(5):
        text = Text(" │ ").join(_parts(s, short))
        if text.cell_len <= width - 2:  # the line's padding
            break
    return text


def _parts(s: Status, short: int) -> list[Text]:
    parts: list[Text] = []
    if s.incognito:
        parts.append(Text(" INCOGNITO ", style="bold reverse"))
    daemon = {"up": ("daemon ●", "green"), "down": ("daemon ✕", "red")}.get(
        s.daemon, ("daemon …", "yellow")
    )
    if s.daemon != "up" or short < 3:  # a daemon that answers goes without saying
        parts.append(Text(daemon[0], style=daemon[1]))
    if s.ollama_reachable is None:
        parts.append(Text("ollama …"))
    else:
        mark, style = ("●", "green") if s.ollama_reachable else ("✕", "red")
        host = "" if short else s.ollama_host or ""
        parts.append(Text.assemble((f"ollama {mark}", style), f" {host}" if host else ""))
    if s.chat_model:
        parts.append(Text(s.chat_model, style="red" if s.chat_model in s.missing_models else ""))
    if s.memories is not None:
        held = (f" (+{s.held})" if short > 1 else f" ({s.held} to review)") if s.held else ""
        noun = "memory" if s.memories == 1 else "memories"
        parts.append(Text(f"{s.memories} {noun}{held}"))
    if s.learning:
        parts.append(Text(_learning(s.learning, short), style="cyan"))
    if s.pending:
        why = f": {s.last_failure}" if s.last_failure and not short else ""
        parts.append(Text(f"{s.pending} pending{why}", style="yellow"))
    if s.profile:
        parts.append(Text(f"profile {s.profile}"))
    return parts


def _learning(ends: tuple[Learning, ...], short: int) -> str:
    """ "learning from a session: part 2 of 5" (the first of the ends under way), shorter as
    room runs out: "learning: part 2 of 5", then "learning 2/5"."""
    first = ends[0]
    if short >= 2:
        if not first.parts:
            return "learning…"
        if short >= 4:
            return f"learning {first.part}/{first.parts}"
        return f"learning: part {first.part} of {first.parts}"
    what = "a session" if len(ends) == 1 else f"{len(ends)} sessions"
    if not first.parts:
        return f"learning from {what}…"
    text = f"learning from {what}: part {first.part} of {first.parts}"
    return text + (", waiting while you chat" if first.waiting and not short else "")


class Banner(Static):
    """Says what is wrong and how to fix it; hidden when nothing is."""

    DEFAULT_CSS = """
    Banner { display: none; height: auto; background: $error 30%; color: $text;
             padding: 0 1; border-left: thick $error; }
    Banner.-shown { display: block; }
    """
    _shown: str | None = None  # each update lays the screen out again, even when hidden

    def on_mount(self) -> None:
        self.app.status_signal.subscribe(self, self.show)  # type: ignore[attr-defined]
        self.show(self.app.status)  # type: ignore[attr-defined]

    def show(self, status: Status) -> None:
        problems = status.problems(not getattr(self.screen, "SHOWS_CONFIG_ERRORS", False))
        self.set_class(bool(problems), "-shown")
        text = "\n".join(f"⚠ {p}" for p in problems)
        if text != self._shown:
            self._shown = text
            self.update(Text(text))  # plain text: "[memory] dsn" in a message is not markup
