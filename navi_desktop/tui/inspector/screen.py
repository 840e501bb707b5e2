"""The live memory inspector: facts by category, the review inbox, session summaries and
rules, a hybrid search over them, and the highlighted memory in full; and the entities those
memories mention (entities.py), each with its aliases and memories, renamed or merged there.

It stays current without polling: every ``memory.changed`` notice from the daemon reloads the
visible tab, keeping the highlighted memory where it still exists.
"""

from __future__ import annotations

import asyncio
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Input, Label, OptionList, Select, Switch, TabbedContent, TabPane

from navi_desktop.daemon.client import RemoteNotFound
from navi_desktop.limits import (
    ENTITY_SEARCH,
    MAX_ENTITY_NAME,
    MAX_QUERY,
    SEARCH,
    too_long_sentence,
)
from navi_desktop.tui import timefmt
from navi_desktop.tui.base import NaviScreen
from navi_desktop.tui.inspector.actions import ON_MEMORY, MemoryActions
from navi_desktop.tui.inspector.data import CATEGORIES, TAB_BY_ID, TABS, Memory, Query, Tab, fetch
from navi_desktop.tui.inspector.data import counts as tab_counts
from navi_desktop.tui.inspector.detail import DetailPane
from navi_desktop.tui.inspector.entities import ENTITIES, EntityDetail, EntityList, fetch_entities
from navi_desktop.tui.inspector.lists import MemoryList
from navi_desktop.tui.status import Status
from navi_desktop.tui.widgets.ordered import OrderedInput

SEARCH_DELAY_S = 0.2  # wait for a pause in typing before asking the daemon
CHANGES_S = 0.25  # a memory change waits for the rest of its burst: one reload, not one each


COUNTED_TABS_WIDTH = 100  # narrower: tab titles without their counts


class InspectorScreen(MemoryActions, NaviScreen):
    DEFAULT_CSS = """
    InspectorScreen #filters { height: 3; }
    InspectorScreen #search { width: 1fr; }
    InspectorScreen #category { width: 24; }
    InspectorScreen #inactive-label { padding: 1 0 0 2; }
    InspectorScreen #panes { height: 1fr; }
    InspectorScreen #tabs { width: 3fr; }
    InspectorScreen #detail, InspectorScreen #entity-detail { width: 2fr; }
    InspectorScreen #entity-detail { display: none; }
    InspectorScreen.-entities #detail { display: none; }
    InspectorScreen.-entities #entity-detail { display: block; }
    InspectorScreen.-entities #category, InspectorScreen.-entities #inactive,
    InspectorScreen.-entities #inactive-label { display: none; }
    InspectorScreen TabPane { padding: 0; }
    """
    # Confirm, expiry, session and export stay out of the footer (it is full): F1 and the
    # palette list them.
    BINDINGS = [
        Binding("slash", "focus_search", "Search", id="navi.memory.search"),
        Binding("f", "forget", "Forget", id="navi.memory.forget"),
        Binding("e", "edit", "Edit", id="navi.memory.edit"),
        Binding("p", "pin", "Pin / unpin", id="navi.memory.pin"),
        Binding("c", "confirm", "Confirm still true", id="navi.memory.confirm", show=False),
        Binding("t", "expires", "Set expiry", id="navi.memory.expires", show=False),
        Binding("a", "accept", "Accept", id="navi.memory.accept"),
        Binding("E", "edit_accept", "Edit & accept", id="navi.memory.edit_accept"),
        Binding("x", "reject", "Reject", id="navi.memory.reject"),
        Binding("j", "open_session", "Open session", id="navi.memory.open_session", show=False),
        # F9 / Alt+E as in the chat (Ctrl+E is "end of line" in the search field).
        Binding("f9,alt+e", "export", "Export memory", id="navi.memory.export", show=False),
        *(
            Binding(
                str(n), f"tab({tab.id!r})", tab.title, id=f"navi.memory.tab.{tab.id}", show=False
            )
            for n, tab in enumerate(TABS, start=1)
        ),
        Binding(
            str(len(TABS) + 1),
            f"tab({ENTITIES!r})",
            "Entities",
            id="navi.memory.tab.entities",
            show=False,
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.dirty = True  # a change came while another screen was on top: reload on return
        self._reload_due = False  # a reload waits for the rest of a burst of changes
        self.history_of: int | None = None  # the memory whose history the detail pane shows
        self._counts: dict[str, int] = {}  # each tab's count, for its label
        self._flagged: dict[str, Any] | None = None  # see _flagged_memories

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="filters"):
            yield OrderedInput(placeholder="Search memory…  ( / )", id="search")
            yield Select(
                [(c.capitalize(), c) for c in CATEGORIES], prompt="All categories", id="category"
            )
            yield Label("Archived too", id="inactive-label")
            yield Switch(id="inactive")
        with Horizontal(id="panes"):
            with TabbedContent(id="tabs"):
                for tab in TABS:
                    with TabPane(tab.title, id=tab.id):
                        yield MemoryList(tab)
                with TabPane("Entities", id=ENTITIES):
                    yield EntityList()
            yield DetailPane(id="detail")
            yield EntityDetail(id="entity-detail")

    def on_mount(self) -> None:
        self.query_one("#list-facts", MemoryList).focus()
        self.set_interval(timefmt.RETIME_S, self.retime)

    def retime(self) -> None:
        """Times shown relative to now ("5m ago") are redrawn as now moves on."""
        if self.is_current:
            self.memory_list.retime()
            self.query_one(DetailPane).retime()
            self.query_one(EntityDetail).retime()

    def action_focus_main(self) -> None:
        self.shown_list.focus()

    def action_tab(self, tab_id: str) -> None:
        """1-5: the Facts, Inbox, Episodes, Rules and Entities tabs."""
        self.query_one(TabbedContent).active = tab_id
        self.shown_list.focus()

    def on_screen_resume(self) -> None:
        if self.dirty:
            self.reload()

    # -- what is shown -------------------------------------------------------------------------

    @property
    def on_entities(self) -> bool:
        return self.query_one(TabbedContent).active == ENTITIES

    @property
    def shown_list(self) -> OptionList:
        return self.query_one(EntityList) if self.on_entities else self.memory_list

    @property
    def tab(self) -> Tab:
        return TAB_BY_ID.get(self.query_one(TabbedContent).active, TABS[0])

    @property
    def memory_list(self) -> MemoryList:
        return self.query_one(f"#list-{self.tab.id}", MemoryList)

    @property
    def current(self) -> Memory | None:
        return self.memory_list.current

    def search_query(self) -> Query:
        category = self.query_one("#category", Select).value
        return Query(
            text=self.query_one("#search", Input).value,
            category=category if isinstance(category, str) else None,
            include_inactive=self.query_one("#inactive", Switch).value,
        )

    def reload(self, soon: bool = False) -> None:
        if not self.is_current:  # a dialog or another mode on top: catch up on return
            self.dirty = True
            return
        self.dirty = False
        self._flagged = None  # a rating or a forget may have changed them
        if not soon:
            self.load()
        elif not self._reload_due:  # the changes of a burst make one reload
            self._reload_due = True
            self.set_timer(CHANGES_S, self._reload_now)

    def _reload_now(self) -> None:
        self._reload_due = False
        self.reload()

    async def _flagged_memories(self) -> dict[str, Any]:
        """Memories that went into a badly rated reply, asked for once per load (not on
        every highlight: arrow keys move it fast)."""
        if self._flagged is None:
            try:
                self._flagged = (await self.navi.link.call("feedback.flagged", {}))["memories"]
            except Exception:  # a detail of the pane: the memory itself is shown
                return {}
        return self._flagged

    @work(exclusive=True, group="inspector-load", exit_on_error=False)
    async def load(self, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        tab, memory_list = self.tab, self.memory_list
        if not self.navi.link.connected:
            self.show_down()
            return
        if self.on_entities:
            await self.load_entities()
            return
        if line := too_long_sentence(self.search_query().text, MAX_QUERY, SEARCH):
            memory_list.message(line)  # said here: the daemon's line names a parameter
            self.show_detail()
            return
        try:
            page = await fetch(self.navi.link, tab, self.search_query())
        except Exception as err:
            if not self.navi.link.connected:
                self.show_down()
                return
            self.navi.report(err, "Loading memories")
            memory_list.message(f"Could not load memories: {err}")
            self.show_detail()
            return
        shown = len(page.memories)
        note = f"Showing {shown} of {page.total}." if page.total > shown else None
        if not shown and self.search_query().searching:
            note = "Nothing matches this search."
        memory_list.show(page.memories, note)
        self.show_detail()

    async def load_entities(self) -> None:
        entity_list = self.query_one(EntityList)
        query = self.query_one("#search", Input).value
        if line := too_long_sentence(query, MAX_ENTITY_NAME, ENTITY_SEARCH):
            entity_list.message(line)
            self.show_detail()
            return
        try:
            entities, total = await fetch_entities(self.navi.link, query)
        except Exception as err:
            if not self.navi.link.connected:
                self.show_down()
                return
            self.navi.report(err, "Loading entities")
            entity_list.message(f"Could not load entities: {err}")
            self.show_detail()
            return
        note = f"Showing {len(entities)} of {total}." if total > len(entities) else None
        if not entities and query.strip():
            note = "No entity has a name that contains this."
        entity_list.show(entities, note)
        if not query.strip():
            self._counts[ENTITIES] = total
            self._label_tabs()
        self.show_detail()

    def _status(self, status: Status) -> None:
        """Tab labels count what the app's status counts: no second ``memory.stats`` call."""
        super()._status(status)
        if status.counts is None:
            return
        self._counts.update(tab_counts(status))
        self._label_tabs()

    def _label_tabs(self) -> None:
        """Titles with their counts; below ``COUNTED_TABS_WIDTH`` columns titles alone, so
        that every tab fits beside the detail pane (the status line counts memories)."""
        tabs = self.query_one(TabbedContent)
        counted = self.size.width >= COUNTED_TABS_WIDTH
        for tab_id, title in [*((t.id, t.title) for t in TABS), (ENTITIES, "Entities")]:
            count = self._counts.get(tab_id)
            tabs.get_tab(tab_id).label = (
                f"{title} ({count})" if counted and count is not None else title
            )

    def on_resize(self) -> None:
        self._label_tabs()

    def show_down(self) -> None:
        detail = self.navi.link.state.detail or "it is not connected yet"
        text = f"No connection to the Navi daemon: {detail}\nMemory shows here when it is back."
        for memory_list in self.query(MemoryList):
            memory_list.message(text)
        self.query_one(EntityList).message(text)
        self.query_one(DetailPane).message(text)
        self.query_one(EntityDetail).message(text)
        self.refresh_bindings()

    @work(exclusive=True, group="inspector-detail", exit_on_error=False)
    async def show_detail(self) -> None:
        """The highlighted memory at once, then its history when the daemon sends it."""
        self.refresh_bindings()
        if self.on_entities:
            await self.show_entity()
            return
        pane = self.query_one(DetailPane)
        memory = self.current
        if memory is None:
            self.history_of = None
            pane.message("Nothing selected." if self.navi.link.connected else "")
            return
        self.history_of = None
        pane.show(memory, None)
        try:
            history = await self.navi.link.memory("history", memory["id"])
        except RemoteNotFound:  # forgotten meanwhile: the reload that follows removes it
            return
        except Exception as err:
            self.navi.report(err, "Reading the memory's history")
            history = []
        if flag := (await self._flagged_memories()).get(str(memory["id"])):
            memory = {**memory, "flagged": flag}
        pane.show(memory, history)
        self.history_of = memory["id"]

    async def show_entity(self) -> None:
        pane = self.query_one(EntityDetail)
        entity = self.query_one(EntityList).current
        if entity is None:
            pane.message("Nothing selected." if self.navi.link.connected else "")
            return
        try:
            profile = await self.navi.link.memory("entity", entity["name"])
        except RemoteNotFound:  # merged or forgotten meanwhile: the reload that follows shows it
            return
        except Exception as err:
            self.navi.report(err, "Reading the entity")
            return
        pane.show(profile)

    def forget_locally(self, ids: list[int]) -> None:
        """Forgotten memories leave every tab and the detail pane at once."""
        for memory_list in self.query(MemoryList):
            memory_list.drop(ids)
        self.show_detail()

    def replace_locally(self, memory: Memory) -> None:
        for memory_list in self.query(MemoryList):
            memory_list.replace(memory)
        self.show_detail()

    # -- events --------------------------------------------------------------------------------

    async def on_daemon(self, method: str, params: Any) -> None:
        if method == "memory.changed":
            self.reload(soon=True)
        elif method == "link.state":
            if params.state == "up":
                self.reload()
            elif params.state == "down":
                self.show_down()

    @on(TabbedContent.TabActivated)
    def _tab_changed(self) -> None:
        self.set_class(self.on_entities, "-entities")
        self.load()

    @on(OptionList.OptionHighlighted)
    def _highlighted(self) -> None:
        self.show_detail()

    @on(Input.Changed, "#search")
    def _search_changed(self) -> None:
        self.load(delay=SEARCH_DELAY_S)

    @on(Input.Submitted, "#search")
    def _search_done(self) -> None:
        self.shown_list.focus()

    @on(Select.Changed, "#category")
    @on(Switch.Changed, "#inactive")
    def _filter_changed(self) -> None:
        self.load()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ON_MEMORY and self.on_entities:  # the list's own keys act on entities
            return False
        return self.can(action)
