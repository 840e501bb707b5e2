"""Hybrid search on the server: PostgreSQL full-text search (words), pgvector (meaning:
HNSW, cosine) and the entity join, fused with the same reciprocal rank fusion, floors and
re-ranking as the SQLite side (search.py) so the two backends rank alike."""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from navi_desktop.errors import InvalidInput
from navi_desktop.memory.documents import memory_text, message_text
from navi_desktop.memory.models import Memory, Message, SearchHit, Signal
from navi_desktop.memory.rerank import boost_named_and_dated, boost_sessions
from navi_desktop.memory.search import FUSION_ORDER, Key, Ranked, SearchOps
from navi_desktop.memory.search_filters import MEMORIES, Filters, make_filters
from navi_desktop.memory.textproc import fts_terms, normalize, tokens

if TYPE_CHECKING:
    from navi_desktop.memory.pg.db import PgDatabase
    from navi_desktop.memory.pg.store import PgMemoryStore

log = logging.getLogger(__name__)
LINK_COUNT_S = 60.0
EF_SEARCH = 200  # HNSW candidates per scan: room for the filters and other profiles' rows


def numbered(sql: str, start: int) -> str:
    """A filter's SQL for PostgreSQL: ``?`` placeholders as $n numbered from ``start``, and
    SQLite's always-true ``1`` as ``true``."""
    count = iter(range(start, start + sql.count("?")))
    sql = re.sub(r"^1( AND |$)", lambda m: "true" + m.group(1), sql)
    return re.sub(r"\?", lambda _: f"${next(count)}", sql)


class PgSearchOps(SearchOps):
    async def search(
        self: PgMemoryStore,
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
        """Best matches for any text (see the SQLite side's ``search``)."""
        filters = make_filters(kinds, categories, exclude_session, since, until, include_inactive)
        if not 1 <= limit <= 1000:
            raise InvalidInput(f"limit must be between 1 and 1000, got {limit}")
        vector = await self._query_vector(query)
        async with self.db.reading():
            found = {"bm25": await self._pg_words(query, filters)}
            if not found["bm25"]:  # no whole word matched: parts of words may (the design's
                found["bm25"] = await self._pg_substrings(query, filters)  # substring fallback)
            if vector is not None:
                found["vector"] = await self._pg_knn(np.asarray(vector, np.float32), filters)
            found["entity"] = await self._pg_entities(query, filters)
            signals = {name: found[name] for name in FUSION_ORDER if name in found}
            scores, detail = self._fuse(signals)
            self._drop_unrelated(scores, detail, len(vector) if vector is not None else 0)
            if filters.kinds == ("message",):
                await self._rerank_messages(query, scores, detail, limit)
            order = sorted(scores, key=lambda k: (-scores[k], k))[:limit]
            return await self._hydrate([(key, scores[key], detail[key]) for key in order])

    async def _pg_words(self: PgMemoryStore, query: str, f: Filters) -> list[tuple[Key, float]]:
        terms = [t.strip('"') for t in fts_terms(query)]
        if not terms:
            return []
        # websearch syntax never fails on user text; "or" joins the terms (any may match).
        text = " or ".join(re.sub(r"[^\w ]", " ", t) for t in terms)
        hits: list[tuple[Key, float]] = []
        for target, where, params in f.targets():
            a = target.alias
            cond = numbered(where, 3)
            rows = await self.db.fetchall(
                f"SELECT {a}.id, ts_rank_cd('{{0, 0, 0.5, 1}}', {a}.tsv, q) AS s"
                f" FROM {target.table} {a}, websearch_to_tsquery('english', $1) q"
                f" WHERE {a}.tsv @@ q AND {cond} ORDER BY s DESC, {a}.id DESC LIMIT $2",
                text,
                self.tuning.depth,
                *params,
            )
            hits += [((target.kind, r[0]), float(r[1])) for r in rows]
        hits.sort(key=lambda h: -h[1])
        return hits[: self.tuning.depth]

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
            self.tuning.depth,
            *patterns,
            *params,
        )
        return [((target.kind, r[0]), float(r[1])) for r in rows]

    async def _pg_knn(
        self: PgMemoryStore, vector: np.ndarray, f: Filters
    ) -> list[tuple[Key, float]]:
        assert self.embedder is not None
        dim = len(vector)
        await self._ensure_vector_index(dim)
        await self.db.execute(f"SET LOCAL hnsw.ef_search = {EF_SEARCH}")
        hits: list[tuple[Key, float]] = []
        for target, where, params in f.targets():
            a, col = target.alias, target.column
            cond = numbered(where, 5)
            rows = await self.db.fetchall(
                f"SELECT {a}.id, 1 - (e.vector::vector({dim}) <=> $1::vector({dim})) AS sim"
                f" FROM embeddings e JOIN {target.table} {a} ON {a}.id = e.{col}"
                f" WHERE e.model = $2 AND e.dim = $3 AND {cond}"
                f" ORDER BY e.vector::vector({dim}) <=> $1::vector({dim}) LIMIT $4",
                vector,
                self.embedder.model,
                dim,
                self.tuning.depth,
                *params,
            )
            hits += [((target.kind, r[0]), float(r[1])) for r in rows]
        hits.sort(key=lambda h: -h[1])
        return hits[: self.tuning.depth]

    async def _ensure_vector_index(self: PgMemoryStore, dim: int) -> None:
        """One HNSW index per dimension (a vector column of mixed sizes cannot have one)."""
        known = getattr(self, "_indexed_dims", set())
        if dim not in known:
            await vector_index(self.db, dim)
            self._indexed_dims = {*known, dim}

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
            list(grams),
        )
        named = [r for r in named if r["n"] > 0]
        if not named:
            return []
        total = await self._link_count()
        ids = [r["id"] for r in named]
        weights = [math.log(1 + total / r["n"]) for r in named]
        hits: list[tuple[Key, float]] = []
        for target, where, params in f.targets():
            a, col = target.alias, target.column
            cond = numbered(where, 4)
            rows = await self.db.fetchall(
                f"SELECT l.{col} AS id, sum(w.weight) AS s"
                " FROM unnest($1::bigint[], $2::float8[]) AS w(entity_id, weight)"
                f" JOIN entity_links l ON l.entity_id = w.entity_id AND l.{col} IS NOT NULL"
                f" JOIN {target.table} {a} ON {a}.id = l.{col}"
                f" WHERE {cond} GROUP BY l.{col} ORDER BY s DESC, id DESC LIMIT $3",
                ids,
                weights,
                self.tuning.depth,
                *params,
            )
            hits += [((target.kind, r[0]), float(r[1])) for r in rows]
        hits.sort(key=lambda h: -h[1])
        return hits[: self.tuning.depth]

    async def _link_count(self: PgMemoryStore) -> int:
        """The profile's entity links, for the names' weights: counted at most every
        LINK_COUNT_S (a count read every link, ~5 ms at 10k memories; a weight barely moves)."""
        now = time.monotonic()
        cached = getattr(self, "_links_counted", None)
        if cached is None or now - cached[0] > LINK_COUNT_S:
            count = await self.db.scalar("SELECT count(*) FROM entity_links") or 1
            cached = self._links_counted = (now, int(count))
        return cached[1]

    async def _rerank_messages(
        self: PgMemoryStore,
        query: str,
        scores: dict[Key, float],
        detail: dict[Key, dict[str, Ranked]],
        limit: int,
    ) -> None:
        ids = [key[1] for key in scores if key[0] == "message"]
        if not ids:
            return
        rows = await self.db.fetchall(
            "SELECT id, session_id, name, content FROM messages WHERE id = ANY($1::bigint[])", ids
        )
        found = {r[0]: (r[1], r[2], r[3]) for r in rows}
        boost_sessions(self.tuning, {m: s for m, (s, _, _) in found.items()}, scores, detail)
        boost_named_and_dated(self.tuning, query, found, scores, detail, limit)

    async def _hydrate(
        self: PgMemoryStore, fused: list[tuple[Key, float, dict[str, Ranked]]]
    ) -> list[SearchHit]:
        from navi_desktop.memory.pg.facts import MEMORY_COLUMNS
        from navi_desktop.memory.pg.store import _MESSAGE_COLUMNS

        mem_ids = [key[1] for key, _, _ in fused if key[0] == "memory"]
        msg_ids = [key[1] for key, _, _ in fused if key[0] == "message"]
        memories = {
            r["id"]: r
            for r in await self.db.fetchall(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ANY($1::bigint[])", mem_ids
            )
        }
        messages = {
            r["id"]: r
            for r in await self.db.fetchall(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE id = ANY($1::bigint[])", msg_ids
            )
        }
        hits = []
        for (kind, ident), score, ranks in fused:
            signals = {name: Signal(rank, raw) for name, (rank, raw) in ranks.items()}
            if kind == "memory" and ident in memories:
                row = memories[ident]
                hits.append(
                    SearchHit(
                        row["kind"],
                        ident,
                        memory_text(row),
                        score,
                        signals,
                        memory=Memory.from_row(row),
                    )
                )
            elif kind == "message" and ident in messages:
                row = messages[ident]
                hits.append(
                    SearchHit(
                        "message",
                        ident,
                        message_text(row),
                        score,
                        signals,
                        message=Message.from_row(row),
                    )
                )
        return hits


TRIGRAM_COLUMNS = ("value", "key", "category")


async def trigram_indexes(db: PgDatabase) -> bool:
    """GIN trigram indexes for the substring fallback, where pg_trgm is installed (created
    by an administrator: ``CREATE EXTENSION pg_trgm``); True when they exist. Only the
    tables' owner may create them; anyone else is served by a scan meanwhile."""
    import asyncpg

    if not await db.scalar("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'"):
        return False
    try:
        async with db.transaction():
            for column in TRIGRAM_COLUMNS:
                await db.execute(
                    f"CREATE INDEX IF NOT EXISTS memories_{column}_trgm ON memories"
                    f" USING gin ({column} gin_trgm_ops)"
                )
    except asyncpg.InsufficientPrivilegeError:
        log.info("no trigram indexes yet: only the tables' owner may create them")
        return False
    return True


async def vector_index(db: PgDatabase, dim: int) -> bool:
    """Create the HNSW index for ``dim`` (an expression index on the cast, partial to that
    dimension). Only the tables' owner may: for any other role it is left to the next open
    by the owner, and search scans exactly meanwhile. Returns whether it exists."""
    import asyncpg

    name = f"embeddings_hnsw_{dim}"
    if await db.scalar("SELECT 1 FROM pg_indexes WHERE indexname = $1", name):
        return True
    try:
        async with db.transaction():
            await db.execute(
                f"CREATE INDEX IF NOT EXISTS {name} ON embeddings"
                f" USING hnsw ((vector::vector({dim})) vector_cosine_ops) WHERE dim = {dim}"
            )
    except asyncpg.InsufficientPrivilegeError:
        log.info("no HNSW index for %d-d vectors yet: only the tables' owner may create it", dim)
        return False
    return True


__all__ = ["MEMORIES", "PgSearchOps", "trigram_indexes", "vector_index"]
