"""Entities on the server: what its SQL says differently from the file's (suggestions and the
list). Profiles, renames, merges and model enrichment are the file's code (entity_profiles.py,
entity_enrichment.py) on the server's database. Names sort by code point (COLLATE "C"), as
SQLite's do."""

from __future__ import annotations

from typing import TYPE_CHECKING

from navi_desktop.errors import InvalidInput
from navi_desktop.limits import ENTITY_SEARCH, MAX_ENTITY_NAME, check_length
from navi_desktop.memory.entity_profiles import (
    SORTS,
    SUGGEST_POOL,
    EntitySummary,
    like_pattern,
    suggestion,
)

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore

_ENTITY = "id, name, norm, type"
# Links to the entity ``e``, memory links + message links.
_LINKS = (
    "((SELECT count(*) FROM entity_links l WHERE l.entity_id = e.id AND l.memory_id IS NOT NULL)"
    " + (SELECT count(*) FROM entity_links l"
    " WHERE l.entity_id = e.id AND l.message_id IS NOT NULL))"
)


class PgEntityOps:
    # -- reading -------------------------------------------------------------------------------

    async def _suggestion(self: PgMemoryStore, norm: str) -> str:
        first = norm[0]
        rows = await self.db.fetchall(
            "SELECT norm, name AS owner FROM entities WHERE starts_with(norm, $1) LIMIT $2",
            (first, SUGGEST_POOL),
        )
        rows += await self.db.fetchall(
            "SELECT a.norm, e.name AS owner FROM entity_aliases a JOIN entities e"
            " ON e.id = a.entity_id WHERE starts_with(a.norm, $1) LIMIT $2",
            (first, SUGGEST_POOL),
        )
        return suggestion(norm, {r["norm"]: r["owner"] for r in rows})

    async def list_entities(
        self: PgMemoryStore,
        *,
        sort: str = "mentions",
        query: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[EntitySummary], int]:
        """A page of entities, the most mentioned first or by name; with ``query``, those
        whose name or an alias contains it. Returns (page, total)."""
        if sort not in SORTS:
            raise InvalidInput(f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
        if limit < 1 or offset < 0:
            raise InvalidInput("limit must be at least 1 and offset not negative")
        check_length(query, MAX_ENTITY_NAME, ENTITY_SEARCH)
        where, params = "WHERE $1::text IS NULL", [like_pattern(query)]
        if params[0] is not None:
            where = (
                "WHERE e.norm LIKE $1 OR e.id IN"
                " (SELECT entity_id FROM entity_aliases WHERE norm LIKE $1)"
            )
        order = 'mentions DESC, e.norm COLLATE "C"' if sort == "mentions" else 'e.norm COLLATE "C"'
        async with self.db.reading():
            total = await self.db.scalar(f"SELECT count(*) FROM entities e {where}", params)
            page = await self.db.fetchall(
                f"SELECT e.name, e.type, {_LINKS} AS mentions,"
                " array(SELECT name FROM entity_aliases WHERE entity_id = e.id"
                ' ORDER BY norm COLLATE "C") AS aliases'
                f" FROM entities e {where} ORDER BY {order} LIMIT $2 OFFSET $3",
                (*params, limit, offset),
            )
        out = [
            EntitySummary(
                name=r["name"], type=r["type"], aliases=list(r["aliases"]), mentions=r["mentions"]
            )
            for r in page
        ]
        return out, int(total)

    # -- changing ------------------------------------------------------------------------------
