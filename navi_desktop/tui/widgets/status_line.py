"""The one-line status bar and the problem banner, both drawn from the app's ``Status``."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from navi_desktop.tui.status import Status


class StatusLine(Static):
    DEFAULT_CSS = """
    StatusLine { height: 1; background: $panel; color: $text-muted; padding: 0 1; }
    StatusLine.-incognito { background: $error; color: $text; }
    """

    def on_mount(self) -> None:
        self.app.status_signal.subscribe(self, self.show)  # type: ignore[attr-defined]
        self.show(self.app.status)  # type: ignore[attr-defined]

    def show(self, status: Status) -> None:
        self.set_class(status.incognito, "-incognito")
        self.update(render_status(status))


def render_status(s: Status) -> Text:
    parts: list[Text] = []
    if s.incognito:
        parts.append(Text(" INCOGNITO ", style="bold reverse"))
    daemon = {"up": ("daemon ●", "green"), "down": ("daemon ✕", "red")}.get(
        s.daemon, ("daemon …", "yellow")
    )
    parts.append(Text(daemon[0], style=daemon[1]))
    if s.ollama_reachable is None:
        parts.append(Text("ollama …"))
    else:
        mark, style = ("●", "green") if s.ollama_reachable else ("✕", "red")
        parts.append(Text.assemble((f"ollama {mark} ", style), s.ollama_host or ""))
    if s.chat_model:
        parts.append(Text(s.chat_model, style="red" if s.chat_model in s.missing_models else ""))
    if s.memories is not None:
        held = f" ({s.held} to review)" if s.held else ""
        noun = "memory" if s.memories == 1 else "memories"
        parts.append(Text(f"{s.memories} {noun}{held}"))
    if s.pending:
        why = f": {s.last_failure}" if s.last_failure else ""
        parts.append(Text(f"{s.pending} pending{why}", style="yellow"))
    if s.profile:
        parts.append(Text(f"profile {s.profile}"))
    return Text(" │ ").join(parts)


class Banner(Static):
    """Says what is wrong and how to fix it; hidden when nothing is."""

    DEFAULT_CSS = """
    Banner { display: none; height: auto; background: $error 30%; color: $text;
             padding: 0 1; border-left: thick $error; }
    Banner.-shown { display: block; }
    """

    def on_mount(self) -> None:
        self.app.status_signal.subscribe(self, self.show)  # type: ignore[attr-defined]
        self.show(self.app.status)  # type: ignore[attr-defined]

    def show(self, status: Status) -> None:
        problems = status.problems()
        self.set_class(bool(problems), "-shown")
        self.update("\n".join(f"⚠ {p}" for p in problems))
