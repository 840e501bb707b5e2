"""The highlighted memory in full: its value, where it came from, how sure and how current
Navi is about it, and every change made to it."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from navi_desktop.tui.inspector.data import Memory
from navi_desktop.tui.timefmt import ago

SHORT_ID = 8  # session ids are long; this much tells them apart on screen
CHANGE_CHARS = 60


def when(iso: str | None) -> str:
    """A time as a person says it: "just now", "5m ago", or the date."""
    short = ago(iso)
    if not short:
        return "never"
    if short == "now":
        return "just now"
    return f"{short} ago" if short[-1] in "mhd" and short[:-1].isdigit() else short


def show_value(value: Any) -> str:
    text = " ".join(str(value).split()) if value is not None else "—"
    return text if len(text) <= CHANGE_CHARS else text[: CHANGE_CHARS - 1] + "…"


def change(entry: dict[str, Any]) -> str:
    """What one history entry changed (old → new), in a line."""
    if entry["action"] == "create":
        return ""
    old, new = entry.get("old") or {}, entry.get("new") or {}
    parts = []
    for name in [*old, *(k for k in new if k not in old)]:
        if name in old and name in new:
            parts.append(f"{name}: {show_value(old[name])} → {show_value(new[name])}")
        elif name in new:
            parts.append(f"{name}: {show_value(new[name])}")
        else:
            parts.append(f"{name}: {show_value(old[name])} → —")
    return "; ".join(parts)


def facts_table(memory: Memory) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(ratio=1)
    if memory.get("key"):
        grid.add_row("Key", memory["key"])
    if memory.get("subject"):
        grid.add_row("Subject", memory["subject"])
    grid.add_row("Category", memory.get("category") or "—")
    status = memory["status"] + (" · pinned 📌" if memory.get("pinned") else "")
    grid.add_row("Status", status)
    if memory.get("review_reason"):
        grid.add_row("To review", Text(memory["review_reason"], style="yellow"))
    if memory.get("evidence"):
        grid.add_row("Evidence", Text(f"“{memory['evidence']}”", style="italic"))
    source = memory["source"]
    if memory.get("session_id"):
        source += f" · session {memory['session_id'][:SHORT_ID]} (j opens it)"
    grid.add_row("Source", source)
    grid.add_row("Confidence", f"{memory['confidence']:.2f}")
    grid.add_row("Strength", f"{memory['strength']:.2f} · mentioned {memory['mentions']}×")
    valid = f"from {when(memory['valid_from'])} → "
    valid += when(memory["valid_to"]) if memory.get("valid_to") else "now"
    if memory.get("superseded_by"):
        valid += f" · replaced by #{memory['superseded_by']}"
    grid.add_row("Valid", valid)
    grid.add_row("Last used", when(memory.get("last_used_at")))
    grid.add_row("Created", f"{when(memory['created_at'])} · updated {when(memory['updated_at'])}")
    return grid


def history_table(history: list[dict[str, Any]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(ratio=1)
    for entry in history:
        what = Text(f"{entry['action']} by {entry['actor']}")
        if changed := change(entry):
            what.append(f"\n{changed}", style="dim")
        grid.add_row(when(entry["at"]), what)
    return grid


def render(memory: Memory, history: list[dict[str, Any]] | None) -> RenderableType:
    title = Text.assemble(
        (f"{memory['kind'].capitalize()} #{memory['id']}", "bold"),
        (f" · {memory['category']}" if memory.get("category") else "", "dim"),
    )
    parts: list[RenderableType] = [title, Text(memory["value"], style="bold"), Text()]
    parts.append(facts_table(memory))
    parts += [Text(), Text("History", style="bold")]
    if history is None:
        parts.append(Text("Loading…", style="dim"))
    elif not history:
        parts.append(Text("No changes recorded.", style="dim"))
    else:
        parts.append(history_table(history))
    return Group(*parts)


class DetailPane(VerticalScroll):
    DEFAULT_CSS = """
    DetailPane { width: 1fr; padding: 0 1; border-left: solid $panel-lighten-2; }
    DetailPane > Static { width: 1fr; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="detail-body")

    content: RenderableType = ""  # what the pane shows now (tests read it)

    def show(self, memory: Memory, history: list[dict[str, Any]] | None = None) -> None:
        self._update(render(memory, history))

    def message(self, text: str) -> None:
        self._update(Text(text, style="dim italic"))

    def _update(self, content: RenderableType) -> None:
        self.content = content
        self.query_one("#detail-body", Static).update(content)
