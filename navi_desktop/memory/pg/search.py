"""Hybrid search on the server: PostgreSQL full-text search (words), pgvector (meaning:
HNSW, cosine) and the entity join, fused with the same reciprocal rank fusion, floors and
re-ranking as the SQLite side (search.py) so the two backends rank alike."""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from navi_desktop.memory.facts import MEMORY_COLUMNS
from navi_desktop.memory.match_counts import COUNT_RAISES, within_budget
from navi_desktop.memory.pg.db import numbered
from navi_desktop.memory.pg.refusals import sqlstate
from navi_desktop.memory.pg.vector_search import PgVectorSearchOps
from navi_desktop.memory.search import (
    BM25_ROW_BUDGET,
    ENTITY_LINK_BUDGET,
    Key,
    SearchOps,
)
from navi_desktop.memory.search_filters import MEMORIES, Filters
from navi_desktop.memory.sessions import MESSAGE_COLUMNS
from navi_desktop.memory.textproc import fts_terms, normalize, tokens

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore

log = logging.getLogger(__name__)


class PgSearchOps(PgVectorSearchOps, SearchOps):
    async def _signals(
        self: PgMemoryStore, query: str, vector: Any, f: Filters
    ) -> dict[str, list[tuple[Key, float]]]:
        """Each signal's ranked list, the three at once on connections of their own (the
        server runs them side by side: at 100k memories ~25 ms instead of ~40 one after
        another), or one after another inside a caller's read."""

        async def words() -> list[tuple[Key, float]]:
            # no whole word matched: parts of words may (the design's substring fallback)
            return await self._pg_words(query, f) or await self._pg_substrings(query, f)

        work: dict[str, Callable[[], Awaitable[list[tuple[Key, float]]]]] = {
            "bm25": words,
            "entity": lambda: self._pg_entities(query, f),
        }
        if vector is not None:
            work["vector"] = lambda: self._pg_knn(np.asarray(vector, np.float32), f)

        async def alone(step: Callable[[], Awaitable[list[tuple[Key, float]]]]) -> Any:
            async with self.db.reading():
                return await step()

        if self.db.in_use():
            return {name: await alone(step) for name, step in work.items()}
        # Every signal is waited for, so none is left running (or failing unheard) when
        # another fails, e.g. as the server goes away; the first failure is then raised.
        lists = await asyncio.gather(
            *(alone(step) for step in work.values()), return_exceptions=True
        )
        for outcome in lists:
            if isinstance(outcome, BaseException):
                raise outcome
        return dict(zip(work, lists, strict=True))

    async def _pg_words(self: PgMemoryStore, query: str, f: Filters) -> list[tuple[Key, float]]:
        if self.indexed_words:
            try:
                async with self.db.transaction():  # a savepoint inside a caller's transaction
                    return await self._pg_word_hits(query, f)
            except Exception as exc:  # the driver's error, or the line db.py made of it
                if sqlstate(exc) != "42883":  # undefined_function
                    raise
                # Dropped since this store opened, by an update its owner could not remake
                # them in (schema step 0008): a superuser's next open makes them again.
                log.info("word search scans: the functions that read its index are gone")
                self.indexed_words = False
        return await self._pg_word_hits(query, f)

    async def _pg_word_hits(self: PgMemoryStore, query: str, f: Filters) -> list[tuple[Key, float]]:
        # Each term as websearch text: that syntax never fails on user text.
        terms = [re.sub(r"[^\w ]", " ", t.strip('"')) for t in fts_terms(query)]
        if not terms:
            return []
        hits: list[tuple[Key, float]] = []
        for target, where, params in f.targets():
            a = target.alias
            if self.indexed_words:
                kept = await self._pg_informative(terms, target.table)
                if not kept:
                    continue
                cond = numbered(where, 6)
                # Only the newest rows the budget allows are ranked (see the SQLite side's
                # _informative); the filters apply to those.
                rows = await self.db.fetchall(
                    f"SELECT {a}.id, w.rank FROM word_matches($1, $2,"
                    " websearch_to_tsquery('english', $3), $4) w"
                    f" JOIN {target.table} {a} ON {a}.id = w.id WHERE {cond}"
                    f" ORDER BY w.rank DESC, {a}.id DESC LIMIT $5",
                    (
                        target.table,
                        self.user_id,
                        " or ".join(kept),
                        BM25_ROW_BUDGET,
                        self.tuning.depth,
                        *params,
                    ),
                )
            else:  # a scan of the profile's rows, each match ranked (see word_matches)
                cond = numbered(where, 3)
                rows = await self.db.fetchall(
                    f"SELECT {a}.id, ts_rank_cd('{{0, 0, 0.5, 1}}', {a}.tsv, q) AS s"
                    f" FROM {target.table} {a}, websearch_to_tsquery('english', $1) q"
                    f" WHERE {a}.tsv @@ q AND {cond} ORDER BY s DESC, {a}.id DESC LIMIT $2",
                    (" or ".join(terms), self.tuning.depth, *params),
                )
            hits += [((target.kind, r[0]), float(r[1])) for r in rows]
        hits.sort(key=lambda h: -h[1])
        return hits[: self.tuning.depth]

    async def _pg_informative(self: PgMemoryStore, terms: list[str], table: str) -> list[str]:
        """The terms worth ranking: rarest first, while their matches stay within the budget
        (see the SQLite side). A term with no word left to PostgreSQL (a stopword) is dropped."""
        cap = BM25_ROW_BUDGET + 1
        for _ in range(COUNT_RAISES + 1):
            rows = await self.db.fetchall(
                "SELECT t, word_match_count($2, $3, q, $4)"
                " FROM unnest($1::text[]) AS t, websearch_to_tsquery('english', t) AS q"
                " WHERE numnode(q) > 0",
                (terms, table, self.user_id, cap),
            )
            counts = [(int(r[1]), r[0]) for r in rows]
            if len(counts) < 2 or min(n for n, _ in counts) < cap:
                break
            cap *= 4
        if not counts:
            return []
        kept = {term for _, term in within_budget(counts, BM25_ROW_BUDGET)}
        return [t for t in terms if t in kept]

    async def _pg_substrings(
        self: PgMemoryStore, query: str, f: Filters
    ) -> list[tuple[Key, float]]:
        """Memories whose value, key or category contains a word of the query (3 letters or
        more), most such words first: GIN trigram indexes serve it where pg_trgm is installed
        (trigram_indexes), a scan of the profile's memories where it is not."""
        parts = sorted({w for w in tokens(query) if len(w) >= 3})[:8]
        target = next((t for t, _, _ in f.targets() if t.table == "memories"), None)
        if not parts or target is None:
            return []
        where, params = next((w, p) for t, w, p in f.targets() if t is target)
        patterns = ["%" + re.sub(r"([\\%_])", r"\\\1", w) + "%" for w in parts]
        a = target.alias
        hits = " + ".join(
            f"(({a}.value ILIKE ${i}) OR ({a}.key ILIKE ${i}) OR ({a}.category ILIKE ${i}))::int"
            for i in range(2, 2 + len(patterns))
        )
        cond = numbered(where, 2 + len(patterns))
        rows = await self.db.fetchall(
            f"SELECT id, n FROM (SELECT {a}.id, {hits} AS n FROM {target.table} {a}"
            f" WHERE {cond}) found WHERE n > 0 ORDER BY n DESC, id DESC LIMIT $1",
            (self.tuning.depth, *patterns, *params),
        )
        return [((target.kind, r[0]), float(r[1])) for r in rows]

    async def _pg_entities(self: PgMemoryStore, query: str, f: Filters) -> list[tuple[Key, float]]:
        words = tokens(query)
        grams = {
            normalize(" ".join(words[i : i + n]))
            for n in (1, 2, 3)
            for i in range(len(words) - n + 1)
        }
        grams.discard("")
        if not grams:
            return []
        named = await self.db.fetchall(
            "SELECT e.id, (SELECT count(*) FROM entity_links l WHERE l.entity_id = e.id) AS n"
            " FROM entities e WHERE e.norm = ANY($1::text[]) OR e.id IN"
            " (SELECT entity_id FROM entity_aliases WHERE norm = ANY($1::text[]))",
            (list(grams),),
        )
        named = [r for r in named if r["n"] > 0]
        if not named:
            return []
        total = await self.db.recent_count("SELECT count(*) FROM entity_links") or 1
        found = [(int(r["n"]), int(r["id"])) for r in named]
        if total > ENTITY_LINK_BUDGET:  # the rarest names, as on the SQLite side
            found = within_budget(found, ENTITY_LINK_BUDGET)
        ids = [ident for _, ident in found]
        weights = [math.log(1 + total / n) for n, _ in found]
        hits: list[tuple[Key, float]] = []
        for target, where, params in f.targets():
            a, col = target.alias, target.column
            cond = numbered(where, 5)
            # Scored from the links alone; the owners' rows are read for the filters only for
            # the best-scored prefix, and for the rest only when too few of it pass (as
            # _top_filtered on the SQLite side): 2,000 links cost ~10 ms in lookups.
            sql = (
                f"SELECT r.id, r.s FROM (SELECT l.{col} AS id, sum(w.weight) AS s"
                " FROM unnest($1::bigint[], $2::float8[]) AS w(entity_id, weight)"
                f" JOIN entity_links l ON l.entity_id = w.entity_id AND l.{col} IS NOT NULL"
                f" GROUP BY l.{col} ORDER BY s DESC, id DESC LIMIT $4) r"
                f" JOIN {target.table} {a} ON {a}.id = r.id WHERE {cond}"
                " ORDER BY r.s DESC, r.id DESC LIMIT $3"
            )
            depth = self.tuning.depth
            rows = await self.db.fetchall(sql, (ids, weights, depth, 4 * depth, *params))
            if len(rows) < depth:  # LIMIT NULL: every linked row
                rows = await self.db.fetchall(sql, (ids, weights, depth, None, *params))
            hits += [((target.kind, r[0]), float(r[1])) for r in rows]
        hits.sort(key=lambda h: -h[1])
        return hits[: self.tuning.depth]

    async def _rows_by_id(
        self: PgMemoryStore, table: str, ids: list[int], columns: str = "*"
    ) -> list[Any]:
        """Rows for the shared re-ranking and hits (search_hits.py); "*" means the table's
        columns without its tsvector."""

        if not ids:
            return []
        if columns == "*":
            columns = MEMORY_COLUMNS if table == "memories" else MESSAGE_COLUMNS
        return await self.db.fetchall(
            f"SELECT {columns} FROM {table} WHERE id = ANY($1::bigint[])", (ids,)
        )


__all__ = ["MEMORIES", "PgSearchOps"]
