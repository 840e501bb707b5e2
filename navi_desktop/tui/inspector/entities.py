"""The inspector's Entities tab: the people, places and projects Navi has met, each with its
other names and the memories that mention it; rename one, or merge another into it.

The screen lists and shows (``fetch_entities``, ``EntityList.show``, ``EntityDetail.show``);
the list's own keys rename and merge, through dialogs that show the daemon's refusal in place
("there is already an entity named …") so the user can fix the name and try again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.widgets import Button, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from navi_desktop.errors import InvalidInput
from navi_desktop.tui.dialogs import ConfirmScreen, Dialog, confirmed
from navi_desktop.tui.inspector.data import Link
from navi_desktop.tui.timefmt import ago
from navi_desktop.tui.widgets.ordered import OrderedInput

if TYPE_CHECKING:
    from navi_desktop.tui.app import NaviApp

ENTITIES = "entities"  # the tab's id
LIST_LIMIT = 500
ROW_CHARS = 120
Entity = dict[str, Any]  # EntitySummary.to_dict() or EntityProfile.to_dict(), as sent


def clip(text: str, limit: int = ROW_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


async def fetch_entities(link: Link, query: str) -> tuple[list[Entity], int]:
    """The most mentioned entities first; with ``query``, those with a name containing it."""
    reply = await link.memory(
        "entities", sort="mentions", query=query.strip() or None, limit=LIST_LIMIT
    )
    return reply["entities"], int(reply["total"])


def row(entity: Entity) -> Text:
    out = Text(clip(entity["name"], 60), style="bold")
    out.append(f"  {entity['mentions']}×", style="dim")
    if entity.get("type"):
        out.append(f"  {entity['type']}", style="dim")
    if entity.get("aliases"):
        out.append(f"  also {clip(', '.join(entity['aliases']), 60)}", style="italic dim")
    return out


def memory_line(memory: dict[str, Any]) -> Text:
    out = Text()
    if key := memory.get("key"):
        out.append(f"{key}: ", style="bold")
    out.append(clip(memory["value"]))
    return out


def render(profile: Entity) -> RenderableType:
    """The entity in full: names, how often it comes up, and what mentions it."""
    memories = profile["mentions"] - profile["messages"]
    about = [profile["type"]] if profile.get("type") else []
    about.append(
        f"mentioned by {plural(memories, 'memory', 'memories')} and"
        f" {plural(profile['messages'], 'message')}"
    )
    parts: list[RenderableType] = [
        Text(profile["name"], style="bold"),
        Text(" · ".join(about), style="dim"),
    ]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_row("Also called", ", ".join(profile["aliases"]) or "—")
    parts += [Text(), grid]
    for title, items, total, timed in (
        ("Facts", profile["facts"], profile["facts_total"], False),
        ("Session summaries", profile["episodes"], profile["episodes_total"], True),
    ):
        shown = f"{total}" if len(items) == total else f"{len(items)} of {total}"
        parts += [Text(), Text(f"{title} ({shown})", style="bold")]
        if not items:
            parts.append(Text("  None.", style="dim"))
            continue
        lines = Table.grid(padding=(0, 1))  # a long line wraps under itself, not the margin
        lines.add_column(width=1)
        if timed:
            lines.add_column(style="dim", no_wrap=True)
        lines.add_column(ratio=1)
        lines.add_column(style="dim", no_wrap=True)
        for memory in items:
            when = [ago(memory.get("created_at"))] if timed else []
            lines.add_row("", *when, memory_line(memory), f"#{memory['id']}")
        parts.append(lines)
    parts += [Text(), Text("r renames it · m merges another entity into it", style="dim")]
    return Group(*parts)


class EntityDetail(VerticalScroll):
    DEFAULT_CSS = """
    EntityDetail { width: 1fr; padding: 0 1; border-left: solid $panel-lighten-2; }
    EntityDetail > Static { width: 1fr; }
    """

    content: RenderableType = ""  # what the pane shows now (tests read it)
    shown: Entity | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="entity-body")

    def show(self, profile: Entity) -> None:
        self.shown = profile
        self._update(render(profile))

    def retime(self) -> None:
        """Redraw the summaries' ages ("5m") as time moves on."""
        if self.shown is not None:
            self._update(render(self.shown))

    def message(self, text: str) -> None:
        self.shown = None
        self._update(Text(text, style="dim italic"))

    def _update(self, content: RenderableType) -> None:
        self.content = content
        self.query_one("#entity-body", Static).update(content)


class NameScreen(Dialog):
    """Ask for a name; ``submit`` tries it and returns why it was refused (shown in place,
    the dialog stays open) or None (the dialog closes with the name)."""

    def __init__(
        self,
        title: str,
        value: str = "",
        *,
        action: str,
        placeholder: str = "",
        submit: Callable[[str], Awaitable[str | None]],
    ) -> None:
        super().__init__()
        self._title, self._value, self._action = title, value, action
        self._placeholder, self._submit = placeholder, submit

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(escape(self._title), classes="title")  # names are shown as written
            yield OrderedInput(self._value, placeholder=self._placeholder, id="name")
            yield Static("", classes="error", id="error")
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button(self._action, id="save", variant="primary")

    @on(Input.Submitted)
    @on(Button.Pressed, "#save")
    async def _save(self) -> None:
        name = self.query_one("#name", Input).value.strip()
        problem = "a name cannot be empty" if not name else await self._submit(name)
        if problem:
            self.query_one("#error", Static).update(Text(problem))
            return
        self.dismiss(name)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)


class EntityList(OptionList):
    """One option per entity, its id the entity's name; ``r`` and ``m`` act on the
    highlighted one."""

    DEFAULT_CSS = """
    EntityList { height: 1fr; border: none; }
    EntityList:focus { border: none; }
    """
    BINDINGS = [
        Binding("r", "rename", "Rename", id="navi.entity.rename"),
        Binding("m", "merge", "Merge into it", id="navi.entity.merge"),
    ]
    EMPTY = "No entities yet: Navi notes the names you mention as you chat."

    def __init__(self, **kw: Any) -> None:
        super().__init__(id=f"list-{ENTITIES}", **kw)
        self.entities: dict[str, Entity] = {}
        self.wanted: str | None = None  # highlight this name when it shows (renamed, merged)

    @property
    def navi(self) -> NaviApp:
        return self.app  # type: ignore[return-value]

    @property
    def current(self) -> Entity | None:
        option = self.highlighted_option
        if option is None or option.id is None:
            return None
        return self.entities.get(option.id)

    def show(self, entities: list[Entity], note: str | None = None) -> None:
        """Replace the rows, keeping the highlighted entity (or its place)."""
        current = self.current
        name = self.wanted or (current["name"] if current else None)
        place = self.highlighted
        self.clear_options()
        self.entities = {e["name"]: e for e in entities}
        if not entities:
            self.add_option(Option(Text(note or self.EMPTY, style="dim italic"), disabled=True))
            return
        self.add_options([Option(row(e), id=e["name"]) for e in entities])
        if note:
            self.add_option(Option(Text(note, style="dim italic"), disabled=True))
        if name in self.entities:
            self.wanted = None
            self.highlighted = self.get_option_index(name)
        else:
            self.highlighted = min(place or 0, len(entities) - 1)

    def message(self, text: str) -> None:
        self.clear_options()
        self.entities = {}
        self.add_option(Option(Text(text, style="dim italic"), disabled=True))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("rename", "merge"):
            return True if self.current is not None else None
        return True

    # -- rename and merge ----------------------------------------------------------------------

    async def _call(self, method: str, *args: Any) -> tuple[Entity | None, str | None]:
        """(the daemon's answer, None), or (None, why it refused) for a refusal the user can
        fix in the dialog; any other failure is reported and also returned as the reason."""
        try:
            return await self.navi.link.memory(method, *args), None
        except InvalidInput as err:  # unknown name, a name taken, the same entity
            return None, str(err)
        except Exception as err:
            self.navi.report(err, "Asking the daemon")
            return None, str(err)

    @work(exclusive=True, group="entity-action", exit_on_error=False)
    async def action_rename(self) -> None:
        entity = self.current
        if entity is None:
            return
        done: dict[str, Entity] = {}

        async def rename(name: str) -> str | None:
            profile, problem = await self._call("rename_entity", entity["name"], name)
            if profile is not None:
                done["profile"] = profile
            return problem

        await self.app.push_screen_wait(
            NameScreen(
                f"Rename “{clip(entity['name'], 50)}”",
                entity["name"],
                action="Rename",
                submit=rename,
            )
        )
        if profile := done.get("profile"):
            self.wanted = profile["name"]
            self.app.notify(f"Renamed to “{clip(profile['name'], 60)}”; the old name is an alias")

    @work(exclusive=True, group="entity-action", exit_on_error=False)
    async def action_merge(self) -> None:
        entity = self.current
        if entity is None:
            return
        found: dict[str, Entity] = {}

        async def check(name: str) -> str | None:
            other, problem = await self._call("entity", name)
            if other is None:
                return problem
            if other["name"] == entity["name"]:
                return f"“{name}” is {entity['name']} itself: name another entity"
            found["other"] = other
            return None

        answer = await self.app.push_screen_wait(
            NameScreen(
                f"Merge another entity into “{clip(entity['name'], 50)}”",
                action="Next",
                placeholder="the other entity's name or alias",
                submit=check,
            )
        )
        other = found.get("other")
        if answer is None or other is None:
            return
        names = ", ".join([other["name"], *other["aliases"]])
        mentions = plural(other["mentions"], "memory or message", "memories and messages")
        body = (
            f"“{other['name']}” is the same as “{entity['name']}”: its names ({names}) become"
            f" aliases of “{entity['name']}”, and the {mentions} that mention it are linked to"
            " it. A merge cannot be split again."
        )
        title = f"Merge “{clip(other['name'], 30)}” into “{clip(entity['name'], 30)}”?"
        dialog = ConfirmScreen(title, body, yes="Merge", danger=False)
        if not confirmed(await self.app.push_screen_wait(dialog)):
            return
        merged, problem = await self._call("merge_entities", entity["name"], other["name"])
        if merged is None:
            self.app.notify(escape(f"Not merged: {problem}"), severity="error", timeout=8)
            return
        self.wanted = merged["name"]
        self.app.notify(f"Merged “{clip(other['name'], 40)}” into “{clip(merged['name'], 40)}”")
