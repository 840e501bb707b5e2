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

from navi_desktop.expiry import describe, is_expired, local_time
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


ACTORS = {
    "user": "you",
    "extraction": "Navi, from a conversation",
    "decay": "Navi, as it faded",
    "system": "Navi",
    "forget": "forgetting",
    "import": "an import",
    "assistant": "Navi, in a chat",
}
SOURCES = {
    "user_explicit": "told by you",
    "tool_call": "saved by Navi during a chat",
    "auto_discovery": "found by Navi",
}
FIELD_NAMES = {"value": "value", "key": "key", "category": "category", "subject": "subject"}


def by_whom(actor: str) -> str:
    return ACTORS.get(actor, actor)


def change(entry: dict[str, Any]) -> str:
    """One history entry as a person would say it: "pinned by you", "value changed from "tea"
    to "green tea"", "replaces #4". Unchanged fields and internal names stay out."""
    action, who = entry["action"], by_whom(entry["actor"])
    old, new = entry.get("old") or {}, entry.get("new") or {}
    if action == "create":
        return f"learned from {who}" if who != "you" else "added by you"
    if action in ("pin", "unpin"):
        return f"{action}ned by {who}"
    if action == "accept":
        return f"accepted by {who} after review"
    if action == "confirm":
        return f"confirmed as still true by {who}"
    if action == "restore":
        return f"restored by {who}"
    if action == "archive":
        why = "it faded from disuse" if entry["actor"] == "decay" else new.get("reason")
        return "archived" + (f": {why}" if why else f" by {who}")
    if action == "strengthen":
        said = new.get("mentions")
        text = f"mentioned again ({said} times now)" if said else "mentioned again"
        return text + (", which confirmed it" if new.get("status") == "active" else "")
    if action == "supersedes":
        return f"replaces #{new.get('supersedes')}"
    if action == "superseded":
        return f"replaced by #{new.get('superseded_by')}"
    if action == "import":
        return "imported" + (f" (was #{new['from_id']})" if new.get("from_id") else "")
    if action in ("edit", "rewrite"):
        parts = [expiry_change(new.get("expires_at"))] if "expires_at" in new else []
        parts += [
            f"{FIELD_NAMES.get(k, k)} changed from “{show_value(old.get(k))}” to "
            f"“{show_value(new.get(k))}”"
            for k in new
            if old.get(k) != new.get(k) and k != "expires_at"
        ]
        verb = "by you" if action == "edit" else "when something was forgotten"
        return "; ".join(parts) + f" ({verb})" if parts else f"edited by {who}"
    if action == "redact":
        return "text removed when something was forgotten"
    return f"{action} by {who}"


def expiry_change(expires_at: str | None) -> str:
    if not expires_at:
        return "set to never expire"
    return f"set to expire {local_time(expires_at)}"


def earlier_value(history: list[dict[str, Any]] | None) -> str | None:
    """The value the evidence quote was said about, when the value was edited since."""
    for entry in history or []:
        if entry["action"] in ("edit", "rewrite") and "value" in (entry.get("old") or {}):
            return str(entry["old"]["value"])
    return None


def facts_table(memory: Memory, history: list[dict[str, Any]] | None = None) -> Table:
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
    if flag := memory.get("flagged"):
        count = flag["down_rated_replies"]
        text = f"used in {count} {'reply' if count == 1 else 'replies'} you rated bad"
        text += f" · “{flag['note']}”" if flag.get("note") else ""
        grid.add_row("Flagged", Text(text + " · check it is still right", style="yellow"))
    if memory.get("evidence"):
        grid.add_row("Evidence", Text(f"“{memory['evidence']}”", style="italic"))
        if (earlier := earlier_value(history)) is not None:
            # The quote supported the value as it was, not the edited one.
            grid.add_row("", Text(f"said of the earlier value “{show_value(earlier)}”", "dim"))
    source = SOURCES.get(memory["source"], memory["source"])
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
    if memory.get("expires_at"):
        expired = is_expired(memory["expires_at"])
        text = describe(memory["expires_at"])
        text += " · left out of search and the prompt" if expired else ""
        grid.add_row("Expires", Text(text, style="red" if expired else ""))
    if memory.get("last_verified_at"):
        grid.add_row("Verified", f"{when(memory['last_verified_at'])} · confirmed as still true")
    grid.add_row("Last used", when(memory.get("last_used_at")))
    grid.add_row("Created", f"{when(memory['created_at'])} · updated {when(memory['updated_at'])}")
    return grid


def history_table(history: list[dict[str, Any]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(ratio=1)
    for entry in history:
        grid.add_row(when(entry["at"]), Text(change(entry)))
    return grid


def render(memory: Memory, history: list[dict[str, Any]] | None) -> RenderableType:
    title = Text.assemble(
        (f"{memory['kind'].capitalize()} #{memory['id']}", "bold"),
        (f" · {memory['category']}" if memory.get("category") else "", "dim"),
    )
    parts: list[RenderableType] = [title, Text(memory["value"], style="bold"), Text()]
    parts.append(facts_table(memory, history))
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

    shown: tuple[Memory, list[dict[str, Any]] | None] | None = None

    def show(self, memory: Memory, history: list[dict[str, Any]] | None = None) -> None:
        self.shown = (memory, history)
        self._update(render(memory, history))

    def retime(self) -> None:
        """Redraw "just now" and "5m ago" as time moves on."""
        if self.shown is not None:
            self._update(render(*self.shown))

    def message(self, text: str) -> None:
        self.shown = None
        self._update(Text(text, style="dim italic"))

    def _update(self, content: RenderableType) -> None:
        self.content = content
        self.query_one("#detail-body", Static).update(content)
