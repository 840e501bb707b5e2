"""The vector signal of the server's hybrid search: pgvector's HNSW index (cosine), or an
exact measure of a small profile's vectors."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from navi_desktop.memory.pg.db import numbered
from navi_desktop.memory.search import Key
from navi_desktop.memory.search_filters import Filters

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore

EF_SEARCH = 200  # HNSW candidates per scan: room for the filters and other profiles' rows
EF_SEARCH_MAX = 1000  # pgvector's limit
# Profiles measured exactly, not through HNSW: up to EXACT_ALWAYS vectors (a few ms), and up
# to EXACT_UP_TO when they hold less than EXACT_SHARE of the server's vectors. At 10k vectors
# beside 100k others: ~17 ms exactly, ~45 ms through HNSW at ef_search 1,000; alone on the
# server, HNSW at 200 takes ~7 ms.
EXACT_ALWAYS = 2_000
EXACT_UP_TO = 10_000
EXACT_SHARE = 0.5


class PgVectorSearchOps:
    async def _pg_knn(
        self: PgMemoryStore, vector: np.ndarray, f: Filters
    ) -> list[tuple[Key, float]]:
        assert self.embedder is not None
        dim = len(vector)
        await self._ensure_vector_index(dim)
        depth = self.tuning.depth
        mine = await self.db.recent_count("SELECT count(*) FROM embeddings")
        # HNSW's candidates are every profile's, filtered afterwards (pgvector 0.6 has no
        # iterative scan): a profile holding a small share of the server's vectors needs
        # more of them to keep ``depth`` of its own, and a small one is measured exactly.
        # Every profile's vectors, as the server's statistics estimate them (a count would
        # read rows this role may not see).
        server = await self.db.recent_count(
            "SELECT greatest(reltuples, 0)::bigint FROM pg_class"
            " WHERE oid = to_regclass('embeddings')"
        )
        share = mine / max(server, mine, 1)
        ef = min(EF_SEARCH_MAX, max(EF_SEARCH, math.ceil(2 * depth / max(share, 1e-9))))
        exact = mine <= EXACT_ALWAYS or (mine <= EXACT_UP_TO and share < EXACT_SHARE)
        hits: list[tuple[Key, float]] = []
        if exact:
            hits = await self._pg_exact(vector, f)
        else:
            hits = []
            async with self.db.transaction():  # SET LOCAL holds only inside one
                await self.db.execute(f"SET LOCAL hnsw.ef_search = {ef}")
                for target, where, params in f.targets():
                    a, col = target.alias, target.column
                    distance = f"e.vector::vector({dim}) <=> $1::vector({dim})"
                    rows = await self.db.fetchall(
                        f"SELECT {a}.id, 1 - ({distance}) AS sim"
                        f" FROM embeddings e JOIN {target.table} {a} ON {a}.id = e.{col}"
                        f" WHERE e.model = $2 AND e.dim = $3 AND {numbered(where, 5)}"
                        f" ORDER BY {distance} LIMIT $4",
                        (vector, self.embedder.model, dim, depth, *params),
                    )
                    hits += [((target.kind, r[0]), float(r[1])) for r in rows]
        hits.sort(key=lambda h: -h[1])
        return hits[:depth]

    async def _pg_exact(
        self: PgMemoryStore, vector: np.ndarray, f: Filters
    ) -> list[tuple[Key, float]]:
        """This profile's vectors measured exactly: its own rows named (so their index
        serves, not a scan of every profile's), uncast (a cast per row cost more than the
        distance) so HNSW's index is not used, and the filters applied to the nearest prefix
        first (as _top_filtered on the SQLite side). ~2 µs a 768-d vector here."""
        assert self.embedder is not None
        depth = self.tuning.depth
        hits: list[tuple[Key, float]] = []
        for target, where, params in f.targets():
            a, col = target.alias, target.column
            sql = (
                f"SELECT {a}.id, 1 - r.d FROM (SELECT e.{col} AS owner,"
                " e.vector <=> $1::vector AS d FROM embeddings e WHERE e.user_id = $5"
                f" AND e.model = $2 AND e.dim = $3 AND e.{col} IS NOT NULL"
                " ORDER BY d LIMIT $6) r"
                f" JOIN {target.table} {a} ON {a}.id = r.owner AND {a}.user_id = $5"
                f" WHERE {numbered(where, 7)} ORDER BY r.d, {a}.id LIMIT $4"
            )
            args = (vector, self.embedder.model, len(vector), depth, self.user_id)
            rows = await self.db.fetchall(sql, (*args, 4 * depth, *params))
            if len(rows) < depth:  # LIMIT NULL: all of them
                rows = await self.db.fetchall(sql, (*args, None, *params))
            hits += [((target.kind, r[0]), float(r[1])) for r in rows]
        return hits

    async def _ensure_vector_index(self: PgMemoryStore, dim: int) -> None:
        """One HNSW index per dimension (a vector column of mixed sizes cannot have one)."""
        known = getattr(self, "_indexed_dims", set())
        if dim not in known:
            from navi_desktop.memory.pg.search_indexes import vector_index

            await vector_index(self.db, dim)
            self._indexed_dims = {*known, dim}
