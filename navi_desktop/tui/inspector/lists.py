"""One tab's list of memories: facts under a header per category, the others one per row."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from navi_desktop.tui.inspector.data import CATEGORIES, Memory, Tab
from navi_desktop.tui.timefmt import ago

ROW_CHARS = 160  # an episode's summary is cut here in the list; the detail pane has it all
HEADER_PREFIX = "category:"


def clip(text: str, limit: int = ROW_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def row(tab: Tab, memory: Memory) -> Text:
    """How one memory reads in a list."""
    out = Text()
    if tab.inbox:
        out.append(f"[{memory.get('category') or memory['kind']}] ", style="dim")
    elif tab.kind == "episode":
        out.append(f"{ago(memory.get('created_at')):>5} ", style="dim")
    key = memory.get("key")
    if key and tab.kind != "episode":
        subject = memory.get("subject")
        out.append(f"{subject} · {key}" if subject and subject != "user" else key, style="bold")
        out.append(": ")
    out.append(clip(memory["value"]))
    if memory.get("pinned"):
        out.append(" 📌")
    if memory.get("status") not in ("active", "held"):
        out.append(f" ({memory['status']})", style="italic dim")
    if tab.inbox and memory.get("review_reason"):
        out.append(f"\n  ⚑ {memory['review_reason']}", style="yellow")
    return out


def group_order(category: str | None) -> int:
    return CATEGORIES.index(category) if category in CATEGORIES else len(CATEGORIES)


class MemoryList(OptionList):
    """The options' ids are the memories' ids; category headers are disabled options."""

    DEFAULT_CSS = """
    MemoryList { height: 1fr; border: none; }
    MemoryList:focus { border: none; }
    """

    def __init__(self, tab: Tab, **kw: object) -> None:
        super().__init__(id=f"list-{tab.id}", **kw)  # type: ignore[arg-type]
        self.tab = tab
        self.memories: dict[int, Memory] = {}
        self.note: str | None = None  # the line under the rows ("Showing 50 of 80.")
        # The rows shown, by id and look: a reload reuses those that did not change, which
        # the list has measured already (measuring 500 new rows took ~100 ms a reload).
        self._rows: dict[tuple[object, ...], Option] = {}

    @property
    def current(self) -> Memory | None:
        option = self.highlighted_option
        if option is None or option.id is None or option.id.startswith(HEADER_PREFIX):
            return None
        return self.memories.get(int(option.id))

    def show(self, memories: list[Memory], note: str | None = None) -> None:
        """Replace the rows, keeping the highlighted memory (or its place) where it still is."""
        current = self.current
        place = self.highlighted
        self.memories = {m["id"]: m for m in memories}
        rows = self._build_options(memories)
        shown = self.options
        if (
            memories
            and note == self.note
            and len(shown) == len(rows) + bool(note)  # the note is the last row
            and all(new is old for new, old in zip(rows, shown, strict=False))
        ):
            return  # nothing the list shows changed
        self.clear_options()
        self.note = note
        if not memories:
            self.add_option(Option(Text(note or self.tab.empty, style="dim italic"), disabled=True))
            return
        self.add_options(rows)
        if note:
            self.add_option(Option(Text(note, style="dim italic"), disabled=True))
        if current is not None and current["id"] in self.memories:
            self.highlighted = self.get_option_index(str(current["id"]))
        else:
            self._highlight_near(place or 0)

    def retime(self) -> None:
        """Redraw the rows, whose times ("5m") have moved on."""
        if self.memories:
            self.show(list(self.memories.values()), self.note)

    def message(self, text: str) -> None:
        """An empty list that says why (no daemon, a failed load)."""
        self.clear_options()
        self.memories = {}
        self.note = None
        self.add_option(Option(Text(text, style="dim italic"), disabled=True))

    def drop(self, ids: list[int]) -> None:
        """Remove memories at once (forgotten, accepted), before the daemon's reload."""
        if any(i in self.memories for i in ids):
            self.show([m for i, m in self.memories.items() if i not in ids])

    def replace(self, memory: Memory) -> None:
        """Show a memory's new state (pinned, edited) at once."""
        if memory["id"] in self.memories:
            self.memories[memory["id"]] = memory
            self.show(list(self.memories.values()))

    def _build_options(self, memories: list[Memory]) -> list[Option]:
        made: dict[tuple[object, ...], Option] = {}

        def option(text: Text, option_id: str, disabled: bool = False) -> Option:
            key = (option_id, text.plain, tuple(text.spans), disabled)
            made[key] = self._rows.get(key) or Option(text, id=option_id, disabled=disabled)
            return made[key]

        if not self.tab.grouped:
            options = [option(row(self.tab, m), str(m["id"])) for m in memories]
        else:
            groups: dict[str | None, list[Memory]] = {}
            for memory in memories:  # dicts keep the daemon's order inside each group
                groups.setdefault(memory.get("category"), []).append(memory)
            options = []
            for category in sorted(groups, key=group_order):
                items = groups[category]
                header = Text.assemble(
                    ((category or "uncategorised").capitalize(), "bold"),
                    (f" ({len(items)})", "dim"),
                )
                options.append(option(header, f"{HEADER_PREFIX}{category}", disabled=True))
                options += [option(Text("  ") + row(self.tab, m), str(m["id"])) for m in items]
        self._rows = made
        return options

    def _highlight_near(self, place: int) -> None:
        """The first memory at or after ``place``, else the last before it."""
        count = self.option_count
        after = [i for i in range(min(place, count - 1), count) if self._selectable(i)]
        before = [i for i in range(min(place, count - 1), -1, -1) if self._selectable(i)]
        target = after[0] if after else before[0] if before else None
        if target is not None:
            self.highlighted = target

    def _selectable(self, index: int) -> bool:
        option = self.get_option_at_index(index)
        return not option.disabled
