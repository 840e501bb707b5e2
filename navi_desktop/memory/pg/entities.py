"""Entities on the server: profiles, rename, merge, model enrichment. The rules (names,
refusals, suggestions) are the SQLite side's (entity_profiles.py, entity_enrichment.py); the
statements are PostgreSQL's. Names sort by code point (COLLATE "C"), as SQLite's do."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.entity_enrichment import ENTITY_TYPES
from navi_desktop.memory.entity_profiles import (
    PROFILE_LIMIT,
    SORTS,
    SUGGEST_POOL,
    EntityProfile,
    EntitySummary,
    _name_text,
    check_merge,
    check_rename,
    like_pattern,
    suggestion,
)
from navi_desktop.memory.facts import MEMORY_COLUMNS
from navi_desktop.memory.models import Memory
from navi_desktop.memory.textproc import normalize

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

    async def _entity_row(self: PgMemoryStore, text: str, what: str = "entity") -> Any:
        shown, norm = _name_text(text, f"the {what}'s name")
        row = await self.db.fetchone(
            f"SELECT {_ENTITY} FROM entities WHERE norm = $1 UNION ALL"
            " SELECT e.id, e.name, e.norm, e.type FROM entity_aliases a"
            " JOIN entities e ON e.id = a.entity_id WHERE a.norm = $1 LIMIT 1",
            (norm,),
        )
        if row is None:
            raise NotFound(f"no entity named {shown!r}{await self._suggestion(norm)}")
        return row

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

    async def _aliases(self: PgMemoryStore, entity_id: int) -> list[str]:
        rows = await self.db.fetchall(
            'SELECT name FROM entity_aliases WHERE entity_id = $1 ORDER BY norm COLLATE "C"',
            (entity_id,),
        )
        return [r[0] for r in rows]

    async def _profile(self: PgMemoryStore, row: Any, limit: int) -> EntityProfile:
        ident = row["id"]
        counts = await self.db.fetchone(
            "SELECT (SELECT count(*) FROM entity_links WHERE entity_id = $1"
            " AND memory_id IS NOT NULL), (SELECT count(*) FROM entity_links"
            " WHERE entity_id = $1 AND message_id IS NOT NULL)",
            (ident,),
        )
        # Current: active and not expired (as search and the prompt's memory block see them).
        current = (
            "id IN (SELECT memory_id FROM entity_links WHERE entity_id = $1 AND memory_id IS NOT"
            " NULL) AND status = 'active' AND (expires_at IS NULL OR expires_at > $2)"
        )
        now = now_iso()
        totals = {
            r[0]: r[1]
            for r in await self.db.fetchall(
                f"SELECT kind, count(*) FROM memories WHERE {current} GROUP BY kind", (ident, now)
            )
        }
        found: dict[str, list[Memory]] = {}
        for kind in ("fact", "episode"):
            rows = await self.db.fetchall(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {current} AND kind = $3"
                " ORDER BY updated_at DESC, id DESC LIMIT $4",
                (ident, now, kind, limit),
            )
            found[kind] = [Memory.from_row(r) for r in rows]
        return EntityProfile(
            name=row["name"],
            type=row["type"],
            aliases=await self._aliases(ident),
            mentions=counts[0] + counts[1],
            messages=counts[1],
            facts=found["fact"],
            episodes=found["episode"],
            facts_total=totals.get("fact", 0),
            episodes_total=totals.get("episode", 0),
        )

    async def entity(
        self: PgMemoryStore, name: str, *, limit: int = PROFILE_LIMIT
    ) -> EntityProfile:
        """An entity by its name or an alias: its type, aliases, how many memories and
        messages mention it, and the current facts and session summaries that do."""
        if limit < 1:
            raise InvalidInput(f"limit must be at least 1, got {limit}")
        async with self.db.reading():
            return await self._profile(await self._entity_row(name), limit)

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

    async def rename_entity(self: PgMemoryStore, name: str, new_name: str) -> EntityProfile:
        """Call the entity ``new_name``; its old name becomes an alias. A name that another
        entity has is refused: merge instead."""
        async with self.db.transaction():
            row = await self._entity_row(name)
            shown, norm = _name_text(new_name, "the new name")
            holder = await self.db.fetchone(
                "SELECT id, name FROM entities WHERE norm = $1 UNION ALL SELECT e.id, e.name"
                " FROM entity_aliases a JOIN entities e ON e.id = a.entity_id WHERE a.norm = $1",
                (norm,),
            )
            check_rename(row, holder, shown, norm)
            await self.db.execute("DELETE FROM entity_aliases WHERE norm = $1", (norm,))
            if norm != row["norm"]:  # not only a change of case or spacing: keep the old name
                await self.db.execute(
                    "INSERT INTO entity_aliases (entity_id, name, norm) VALUES ($1, $2, $3)",
                    (row["id"], row["name"], row["norm"]),
                )
            await self.db.execute(
                "UPDATE entities SET name = $1, norm = $2 WHERE id = $3", (shown, norm, row["id"])
            )
            return await self._profile(await self._entity_row(shown), PROFILE_LIMIT)

    async def merge_entities(self: PgMemoryStore, name: str, other: str) -> EntityProfile:
        """Make ``other`` part of ``name``: its name and aliases become aliases of ``name``,
        its links move to ``name`` (a memory that named both is linked once), its type fills
        in a missing one, and ``other`` is gone."""
        async with self.db.transaction():
            keep = await self._entity_row(name)
            gone = await self._entity_row(other, "other entity")
            check_merge(keep, gone, name, other)
            # A memory or message linked to both keeps its link to ``keep`` only.
            await self.db.execute(
                "DELETE FROM entity_links g WHERE g.entity_id = $2 AND EXISTS"
                " (SELECT 1 FROM entity_links k WHERE k.entity_id = $1"
                " AND (k.memory_id = g.memory_id OR k.message_id = g.message_id))",
                (keep["id"], gone["id"]),
            )
            for table in ("entity_links", "entity_aliases"):
                await self.db.execute(
                    f"UPDATE {table} SET entity_id = $1 WHERE entity_id = $2",
                    (keep["id"], gone["id"]),
                )
            await self.db.execute("DELETE FROM entities WHERE id = $1", (gone["id"],))
            await self.db.execute(
                "INSERT INTO entity_aliases (entity_id, name, norm) VALUES ($1, $2, $3)",
                (keep["id"], gone["name"], gone["norm"]),
            )
            if keep["type"] is None and gone["type"] is not None:
                await self.db.execute(
                    "UPDATE entities SET type = $1 WHERE id = $2", (gone["type"], keep["id"])
                )
            return await self._profile(await self._entity_row(keep["name"]), PROFILE_LIMIT)

    # -- found by a model --------------------------------------------------------------------

    async def needing_entities(
        self: PgMemoryStore, *, limit: int = 32, few: int = 1
    ) -> list[Memory]:
        """Active facts and summaries, newest first, with at most ``few`` entities linked and
        not read by a model yet."""
        columns = ", ".join("m." + c for c in MEMORY_COLUMNS.split(", "))
        async with self.db.reading():
            rows = await self.db.fetchall(
                f"SELECT {columns} FROM memories m WHERE m.kind IN ('fact', 'episode')"
                " AND m.status = 'active'"
                " AND NOT EXISTS (SELECT 1 FROM entities_enriched e WHERE e.memory_id = m.id)"
                " AND (SELECT count(*) FROM entity_links l WHERE l.memory_id = m.id) <= $1"
                " ORDER BY m.id DESC LIMIT $2",
                (few, limit),
            )
        return [Memory.from_row(r) for r in rows]

    async def save_model_entities(
        self: PgMemoryStore, found: dict[int, list[tuple[str, str]]], model: str
    ) -> int:
        """Link each memory's (name, type) pairs and mark every memory in ``found`` read by
        ``model``; a memory that went meanwhile is skipped. Returns the links added."""
        at = now_iso()
        added = 0
        async with self.db.transaction():
            for memory_id, names in found.items():
                if not await self.db.scalar("SELECT 1 FROM memories WHERE id = $1", (memory_id,)):
                    continue
                before = await self._links(memory_id)
                await self._link_entities("memory_id", memory_id, [n for n, _ in names])
                added += await self._links(memory_id) - before
                await self.db.executemany(
                    "UPDATE entities SET type = $1 WHERE norm = $2 AND type IS NULL",
                    [(kind, normalize(name)) for name, kind in names if kind in ENTITY_TYPES],
                )
                await self.db.execute(
                    "INSERT INTO entities_enriched (memory_id, model, at) VALUES ($1, $2, $3)"
                    " ON CONFLICT (memory_id) DO UPDATE SET model = excluded.model,"
                    " at = excluded.at",
                    (memory_id, model, at),
                )
        return added

    async def _links(self: PgMemoryStore, memory_id: int) -> int:
        return await self.db.scalar(
            "SELECT count(*) FROM entity_links WHERE memory_id = $1", (memory_id,)
        )
