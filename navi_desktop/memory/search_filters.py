"""What a search looks at: the kinds of row it ranks, and the filters each must pass."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from navi_desktop.errors import InvalidInput
from navi_desktop.memory.clock import check_iso, now_iso
from navi_desktop.memory.models import CATEGORIES, KINDS
from navi_desktop.memory.vectors import MEMORY, MESSAGE


@dataclass(frozen=True)
class Target:
    """One kind of searchable row and where its index entries live."""

    kind: str  # "memory" | "message": the first half of a Key
    table: str
    alias: str
    fts: str
    column: str  # its column in embeddings and entity_links
    owner: int  # its owner code in the bit index


MEMORIES = Target("memory", "memories", "m", "memories_fts", "memory_id", MEMORY)
MESSAGES = Target("message", "messages", "g", "messages_fts", "message_id", MESSAGE)


@dataclass(frozen=True)
class Filters:
    kinds: tuple[str, ...]
    categories: tuple[str, ...] | None
    exclude_session: str | None
    since: str | None
    until: str | None
    include_inactive: bool
    now: str = ""  # current means not expired by now; "" for the time the filter is made

    def __post_init__(self) -> None:
        if not self.now:
            object.__setattr__(self, "now", now_iso())

    @property
    def memory_kinds(self) -> tuple[str, ...]:
        return tuple(k for k in self.kinds if k != "message")

    def targets(self) -> list[tuple[Target, str, list[Any]]]:
        """The kinds of row searched, each with its filter as SQL (on its alias) and params."""
        out = []
        if self.memory_kinds:
            out.append((MEMORIES, *self.memory_sql(MEMORIES.alias)))
        if "message" in self.kinds:
            out.append((MESSAGES, *self.message_sql(MESSAGES.alias)))
        return out

    def memory_sql(self, alias: str = "m") -> tuple[str, list[Any]]:
        marks = ",".join("?" * len(self.memory_kinds))
        sql = [f"{alias}.kind IN ({marks})"]
        params: list[Any] = list(self.memory_kinds)
        if not self.include_inactive:
            # An expired fact leaves search at once, before maintenance archives it.
            sql.append(f"{alias}.status = 'active'")
            sql.append(f"({alias}.expires_at IS NULL OR {alias}.expires_at > ?)")
            params.append(self.now)
        if self.categories:
            sql.append(f"{alias}.category IN ({','.join('?' * len(self.categories))})")
            params += self.categories
        self._common(alias, sql, params)
        return " AND ".join(sql), params

    def message_sql(self, alias: str = "g") -> tuple[str, list[Any]]:
        sql: list[str] = ["1"]
        params: list[Any] = []
        self._common(alias, sql, params)
        return " AND ".join(sql), params

    def _common(self, alias: str, sql: list[str], params: list[Any]) -> None:
        if self.exclude_session:
            sql.append(f"({alias}.session_id IS NULL OR {alias}.session_id != ?)")
            params.append(self.exclude_session)
        if self.since:
            sql.append(f"{alias}.created_at >= ?")
            params.append(self.since)
        if self.until:
            sql.append(f"{alias}.created_at <= ?")
            params.append(self.until)


def make_filters(
    kinds: Sequence[str] | None,
    categories: Sequence[str] | None,
    exclude_session: str | None,
    since: str | None,
    until: str | None,
    include_inactive: bool,
) -> Filters:
    """The filters of one search, checked: an unknown kind or category is the caller's error."""
    kinds = tuple(kinds) if kinds else KINDS
    for kind in kinds:
        if kind not in (*KINDS, "message"):
            raise InvalidInput(f"kind must be one of {', '.join(KINDS)}, message; got {kind!r}")
    for category in categories or ():
        if category not in CATEGORIES:
            raise InvalidInput(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}")
    return Filters(
        kinds=kinds,
        categories=tuple(categories) if categories else None,
        exclude_session=exclude_session,
        since=check_iso(since, "since") if since else None,
        until=check_iso(until, "until") if until else None,
        include_inactive=include_inactive,
    )
