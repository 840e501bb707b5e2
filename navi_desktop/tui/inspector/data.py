"""What each inspector tab shows and how it asks the daemon for it (no Textual here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from navi_desktop.tui.status import Status

# The engine's categories (navi_desktop.memory.models.CATEGORIES): copied, because importing
# the engine would load SQLite and numpy into the TUI. A test checks that they agree.
CATEGORIES = ("profile", "preferences", "technical", "projects", "relationships", "health", "other")
LIST_LIMIT = 500
SEARCH_LIMIT = 50

Memory = dict[str, Any]  # a memory as the daemon sends it (Memory.to_dict())


class Link(Protocol):
    async def memory(self, method: str, *args: Any, **kwargs: Any) -> Any: ...


@dataclass(frozen=True)
class Tab:
    id: str
    title: str
    kind: str | None  # None: every kind
    status: str  # what the tab lists; "held" is the review inbox
    grouped: bool  # grouped by category, with a header per group
    empty: str  # what an empty tab says

    @property
    def inbox(self) -> bool:
        return self.status == "held"


TABS = (
    Tab("facts", "Facts", "fact", "active", True, "No facts yet: Navi learns them as you chat."),
    Tab("inbox", "Inbox", None, "held", False, "Nothing to review."),
    Tab("episodes", "Episodes", "episode", "active", False, "No session summaries yet."),
    Tab("rules", "Rules", "rule", "active", False, "No rules yet."),
)
TAB_BY_ID = {tab.id: tab for tab in TABS}


@dataclass(frozen=True)
class Query:
    text: str = ""
    category: str | None = None
    include_inactive: bool = False  # archived and superseded too

    @property
    def searching(self) -> bool:
        return bool(self.text.strip())


@dataclass(frozen=True)
class Page:
    memories: list[Memory]
    total: int  # how many match, when more than were fetched


def belongs(tab: Tab, query: Query, memory: Memory) -> bool:
    """Whether a memory is shown in this tab: held candidates only in the inbox."""
    if tab.kind and memory.get("kind") != tab.kind:
        return False
    if query.category and memory.get("category") != query.category:
        return False
    status = memory.get("status")
    if tab.inbox:
        return status == "held"
    return status == "active" or (query.include_inactive and status != "held")


async def fetch(link: Link, tab: Tab, query: Query) -> Page:
    """The tab's memories: hybrid search for a query, else the newest first."""
    if query.searching:
        hits = await link.memory(
            "search",
            query.text,
            kinds=[tab.kind] if tab.kind else None,
            categories=[query.category] if query.category else None,
            include_inactive=query.include_inactive or tab.inbox,  # held counts as inactive
            limit=SEARCH_LIMIT,
        )
        found = [h["memory"] for h in hits if h.get("memory")]
        memories = [m for m in found if belongs(tab, query, m)]
        return Page(memories, len(memories))
    # One status, or every status (held ones are dropped here: they belong to the inbox).
    status = None if query.include_inactive and not tab.inbox else tab.status
    reply = await link.memory(
        "list", kind=tab.kind, category=query.category, status=status, limit=LIST_LIMIT
    )
    listed = reply["memories"]
    memories = [m for m in listed if belongs(tab, query, m)]
    return Page(memories, int(reply["total"]) - (len(listed) - len(memories)))


def counts(status: Status) -> dict[str, int]:
    """Each tab's count for its label, from the app's status (``memory.stats``)."""
    return {tab.id: status.count(tab.status, tab.kind) for tab in TABS}
