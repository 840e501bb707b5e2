"""Entity profiles: what Navi knows about a named thing (a person, a place, a project), and the
user's corrections to it: rename, merge.

An entity is a row of ``entities`` (its name, and the type a model gave it); its other names
are rows of ``entity_aliases``; what mentions it are its ``entity_links`` to memories and
messages. A name is an entity's or one alias's, never both: text that mentions an alias is
linked to its entity (``store._link_entities``), so a merge stays merged.

An entity lives while something mentions it: when the last memory or message that links to
it is forgotten or deleted, it goes with its aliases (``store._drop_orphan_entities``, the
aliases by cascade); forgetting a value also removes an alias that says it (scrub.py). A
rename or a merge changes no memory, so ``memory_history`` (one row per change of a memory)
records none.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.limits import ENTITY_SEARCH, MAX_ENTITY_NAME, check_length
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.facts import MEMORY_COLUMNS
from navi_desktop.memory.models import Memory
from navi_desktop.memory.textproc import normalize

if TYPE_CHECKING:
    from navi_desktop.memory.backends import Store
    from navi_desktop.memory.store import MemoryStore

SORTS = ("mentions", "name")
MAX_NAME = MAX_ENTITY_NAME  # an entity's name, as the user types it
PROFILE_LIMIT = 20  # facts and summaries a profile lists by default (the totals count all)
ENTITY_COLUMNS = "id, name, norm, type"
SUGGEST_POOL = 2_000  # names compared with an unknown one: those sharing its first letter
# Links to the entity ``e``, memory links + message links: each count is answered by its
# partial link index (a plain ``entity_id = ?`` can use neither and scans every link).
LINKS = (
    "((SELECT count(*) FROM entity_links l WHERE l.entity_id = e.id AND l.memory_id IS NOT NULL)"
    " + (SELECT count(*) FROM entity_links l"
    " WHERE l.entity_id = e.id AND l.message_id IS NOT NULL))"
)


@dataclass(frozen=True)
class EntitySummary:
    """One entity in a list."""

    name: str
    type: str | None  # person, organisation, project, location, other; None: not known
    aliases: list[str]
    mentions: int  # memories and messages that name it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EntityProfile:
    """Everything Navi knows about one entity. ``facts`` and ``episodes`` (session summaries)
    are the current ones that name it, newest first, up to the limit asked for; the totals
    count them all."""

    name: str
    type: str | None
    aliases: list[str]
    mentions: int  # memories and messages that name it
    messages: int  # of which messages
    facts: list[Memory] = field(default_factory=list)
    episodes: list[Memory] = field(default_factory=list)
    facts_total: int = 0
    episodes_total: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EntityProfile:
        facts = [Memory(**m) for m in data["facts"]]
        episodes = [Memory(**m) for m in data["episodes"]]
        return cls(**data | {"facts": facts, "episodes": episodes})


def _name_text(text: str, what: str) -> tuple[str, str]:
    """(the name as shown, its normal form); ``InvalidInput`` for an empty or unusable one."""
    shown = " ".join(str(text).split())
    if not shown:
        raise InvalidInput(f"{what} is empty: give a name")
    if len(shown) > MAX_NAME:
        raise InvalidInput(f"{what} is {len(shown)} characters long; at most {MAX_NAME}")
    norm = normalize(shown)
    if not norm:
        raise InvalidInput(f"{what} {shown!r} has no letters or digits to name an entity by")
    return shown, norm


def suggestion(norm: str, owners: dict[str, str]) -> str:
    """The end of a "no entity named ..." line: the closest of ``owners`` (a known name or
    alias, in normal form → the entity's name), or where to see the names."""
    close = difflib.get_close_matches(norm, list(owners), n=1, cutoff=0.75)
    if not close:
        return " (`navi memory entities` lists the names Navi knows)"
    owner = owners[close[0]]
    if normalize(owner) == close[0]:
        return f"; did you mean {owner!r}?"
    return f"; did you mean {close[0]!r} (another name of {owner!r})?"


def like_pattern(query: str | None) -> str | None:
    """A LIKE pattern (escape character: backslash) for names containing ``query``; None
    when there is nothing to filter by."""
    # Punctuation alone ("c++") is kept: normalising would strip it to nothing.
    if not query or not (needle := normalize(query) or query.strip().casefold()):
        return None
    return "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def check_rename(row: Any, holder: Any | None, shown: str, norm: str) -> None:
    """Renaming the entity ``row`` to ``shown``: refused when it is already its name, or when
    ``holder`` (the entity that has that name or alias, if any) is another one."""
    if shown == row["name"]:
        raise InvalidInput(f"the entity is already named {shown!r}")
    if holder is not None and holder["id"] != row["id"]:
        other = holder["name"]
        which = (
            f"there is already an entity named {other!r}"
            if normalize(other) == norm
            else f"{shown!r} is already another name of {other!r}"
        )
        raise InvalidInput(
            f"{which}: merge instead (keep {other!r} and merge {row['name']!r} into it)"
        )


def check_merge(keep: Any, gone: Any, name: str, other: str) -> None:
    """Merging needs two entities: ``name`` and ``other`` may not lead to the same one."""
    if keep["id"] != gone["id"]:
        return
    if normalize(name) == normalize(other):
        raise InvalidInput(f"cannot merge {keep['name']!r} with itself: name another entity")
    raise InvalidInput(
        f"{' '.join(name.split())!r} and {' '.join(other.split())!r} are already"
        f" one entity ({keep['name']!r}): nothing to merge"
    )


class EntityOps:
    """Entities' profiles and renames, for both backends; the server has its own suggestions,
    list and merge (pg/entities.py)."""

    # -- reading -------------------------------------------------------------------------------

    async def _entity_row(self: Store, text: str, what: str = "entity") -> Any:
        """The entity named ``text`` (its name or an alias); ``NotFound`` naming the closest
        known name when there is none."""
        shown, norm = _name_text(text, f"the {what}'s name")
        row = await self.db.fetchone(
            f"SELECT {ENTITY_COLUMNS} FROM entities WHERE norm = ?1 UNION ALL"
            " SELECT e.id, e.name, e.norm, e.type FROM entity_aliases a"
            " JOIN entities e ON e.id = a.entity_id WHERE a.norm = ?1 LIMIT 1",
            (norm,),
        )
        if row is None:
            raise NotFound(f"no entity named {shown!r}{await self._suggestion(norm)}")
        return row

    async def _suggestion(self: MemoryStore, norm: str) -> str:
        first = norm[0]  # a range of the norm indexes, not a scan
        bounds = (first, first + "\U0010ffff", SUGGEST_POOL)
        rows = await self.db.fetchall(
            "SELECT norm, name AS owner FROM entities WHERE norm >= ? AND norm < ? LIMIT ?",
            bounds,
        )
        rows += await self.db.fetchall(
            "SELECT a.norm, e.name AS owner FROM entity_aliases a JOIN entities e"
            " ON e.id = a.entity_id WHERE a.norm >= ? AND a.norm < ? LIMIT ?",
            bounds,
        )
        return suggestion(norm, {r["norm"]: r["owner"] for r in rows})

    async def _aliases(self: Store, entity_id: int) -> list[str]:
        rows = await self.db.fetchall(
            f"SELECT name FROM entity_aliases WHERE entity_id = ? ORDER BY {self.NAME_ORDER}",
            (entity_id,),
        )
        return [r[0] for r in rows]

    async def _profile(self: Store, row: Any, limit: int) -> EntityProfile:
        ident = row["id"]
        counts = await self.db.fetchone(
            "SELECT (SELECT count(*) FROM entity_links WHERE entity_id = ?1 AND memory_id IS NOT"
            " NULL), (SELECT count(*) FROM entity_links WHERE entity_id = ?1"
            " AND message_id IS NOT NULL)",
            (ident,),
        )
        # Current: active and not expired (as search and the prompt's memory block see them).
        current = (
            "id IN (SELECT memory_id FROM entity_links WHERE entity_id = ? AND memory_id IS NOT"
            " NULL) AND status = 'active' AND (expires_at IS NULL OR expires_at > ?)"
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
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {current} AND kind = ?"
                " ORDER BY updated_at DESC, id DESC LIMIT ?",
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

    async def entity(self: Store, name: str, *, limit: int = PROFILE_LIMIT) -> EntityProfile:
        """An entity by its name or an alias: its type, aliases, how many memories and
        messages mention it, and the current facts and session summaries that do."""
        if limit < 1:
            raise InvalidInput(f"limit must be at least 1, got {limit}")
        async with self.db.reading():
            return await self._profile(await self._entity_row(name), limit)

    async def list_entities(
        self: MemoryStore,
        *,
        sort: str = "mentions",
        query: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[EntitySummary], int]:
        """A page of entities, the most mentioned first (``sort="mentions"``) or by name;
        with ``query``, those whose name or an alias contains it. Returns (page, total)."""
        if sort not in SORTS:
            raise InvalidInput(f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
        if limit < 1 or offset < 0:
            raise InvalidInput("limit must be at least 1 and offset not negative")
        check_length(query, MAX_ENTITY_NAME, ENTITY_SEARCH)
        where, params = "", []
        if like := like_pattern(query):
            where = (
                "WHERE e.norm LIKE ? ESCAPE '\\' OR e.id IN"
                " (SELECT entity_id FROM entity_aliases WHERE norm LIKE ? ESCAPE '\\')"
            )
            params = [like, like]
        order = "mentions DESC, e.norm" if sort == "mentions" else "e.norm"
        async with self.db.reading():
            total = await self.db.scalar(f"SELECT count(*) FROM entities e {where}", params)
            page = await self.db.fetchall(
                f"SELECT e.*, {LINKS} AS mentions,"
                " (SELECT group_concat(a.name, char(31)) FROM (SELECT name FROM entity_aliases"
                "  WHERE entity_id = e.id ORDER BY norm) a) AS aliases"
                f" FROM entities e {where} ORDER BY {order} LIMIT ? OFFSET ?",
                (*params, limit, offset),
            )
        out = [
            EntitySummary(
                name=r["name"],
                type=r["type"],
                aliases=r["aliases"].split("\x1f") if r["aliases"] else [],
                mentions=r["mentions"],
            )
            for r in page
        ]
        return out, int(total)

    # -- changing ------------------------------------------------------------------------------

    async def rename_entity(self: Store, name: str, new_name: str) -> EntityProfile:
        """Call the entity ``new_name``; its old name becomes an alias, so text that says it
        still finds the entity. A name that another entity has is refused: merge instead."""
        async with self.db.transaction():
            row = await self._entity_row(name)
            shown, norm = _name_text(new_name, "the new name")
            holder = await self.db.fetchone(
                "SELECT id, name FROM entities WHERE norm = ?1 UNION ALL SELECT e.id, e.name"
                " FROM entity_aliases a JOIN entities e ON e.id = a.entity_id WHERE a.norm = ?1",
                (norm,),
            )
            check_rename(row, holder, shown, norm)
            await self.db.execute("DELETE FROM entity_aliases WHERE norm = ?", (norm,))
            if norm != row["norm"]:  # not only a change of case or spacing: keep the old name
                await self.db.execute(
                    "INSERT INTO entity_aliases (entity_id, name, norm) VALUES (?, ?, ?)",
                    (row["id"], row["name"], row["norm"]),
                )
            await self.db.execute(
                "UPDATE entities SET name = ?, norm = ? WHERE id = ?", (shown, norm, row["id"])
            )
            return await self._profile(await self._entity_row(shown), PROFILE_LIMIT)

    async def merge_entities(self: Store, name: str, other: str) -> EntityProfile:
        """Make ``other`` part of ``name``: its name and aliases become aliases of ``name``,
        its links move to ``name`` (a memory that named both is linked once), its type fills
        in a missing one, and ``other`` is gone."""
        async with self.db.transaction():
            keep = await self._entity_row(name)
            gone = await self._entity_row(other, "other entity")
            check_merge(keep, gone, name, other)
            # A memory or message linked to both keeps its link to ``keep`` only.
            await self.db.execute(
                "DELETE FROM entity_links AS g WHERE g.entity_id = ?2 AND EXISTS"
                " (SELECT 1 FROM entity_links k WHERE k.entity_id = ?1"
                " AND (k.memory_id = g.memory_id OR k.message_id = g.message_id))",
                (keep["id"], gone["id"]),
            )
            for table in ("entity_links", "entity_aliases"):
                await self.db.execute(
                    f"UPDATE {table} SET entity_id = ? WHERE entity_id = ?",
                    (keep["id"], gone["id"]),
                )
            await self.db.execute("DELETE FROM entities WHERE id = ?", (gone["id"],))
            await self.db.execute(
                "INSERT INTO entity_aliases (entity_id, name, norm) VALUES (?, ?, ?)",
                (keep["id"], gone["name"], gone["norm"]),
            )
            if keep["type"] is None and gone["type"] is not None:
                await self.db.execute(
                    "UPDATE entities SET type = ? WHERE id = ?", (gone["type"], keep["id"])
                )
            # Links moved without the table shrinking: counts kept by search would not see it.
            self._links_moved()
            return await self._profile(await self._entity_row(keep["name"]), PROFILE_LIMIT)
