"""The vector signal of hybrid search: the 1-bit index's candidates (vectors.py), re-ranked by
the float query's cosine with their stored int8 copies, then filtered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlean

from navi_desktop.memory.search_filters import Filters, Target
from navi_desktop.memory.vectors import Codes, cosines, sign_bits

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore

Key = tuple[str, int]  # ("memory" | "message", id)


class VectorSearchOps:
    async def _codes(self: MemoryStore, vector: Any) -> Codes | None:
        """The coarse index's codes as they are now, when they can answer ``vector``."""
        if vector is None:
            return None
        async with self.db.reading():
            index = await self._bit_index()
        if index is None or index.dim != len(vector):
            return None
        codes = index.snapshot()
        return codes if len(codes) else None

    def _knn(
        self: MemoryStore, codes: Codes, vector: Any, f: Filters, conn: sqlean.Connection
    ) -> list[tuple[Key, float]]:
        """A plain function of a read connection, run in a worker thread (see search)."""
        t = self.tuning
        query_bits = sign_bits(vector).tobytes()
        query = np.asarray(vector, dtype=np.float32)
        wanted = max(t.rerank, int(len(codes) * t.rerank_share))
        hits: list[tuple[Key, float]] = []
        for target, where, params in f.targets():
            ids = codes.candidates(query_bits, wanted, target.owner, query)
            if not ids:
                continue
            # By primary key only (NOT INDEXED): left to itself, the planner may scan through
            # another index (without ANALYZE statistics it did: ~50 ms at 100k memories).
            rows = conn.execute(
                f"SELECT {target.column}, vector FROM embeddings NOT INDEXED"
                f" WHERE id IN ({','.join('?' * len(ids))})",
                ids,
            ).fetchall()
            sims = cosines(query, [row[1] for row in rows])
            order = np.argsort(-sims, kind="stable")
            order = order[sims[order] >= -1]  # not a damaged row's copy
            ranked = list(zip([rows[i][0] for i in order], sims[order].tolist(), strict=True))
            found = self._passing(conn, ranked, target, where, params)
            hits += [((target.kind, owner), sim) for owner, sim in found]
        hits.sort(key=lambda h: -h[1])  # cosine similarity
        return hits[: t.depth]

    def _passing(
        self: MemoryStore,
        conn: sqlean.Connection,
        ranked: list[tuple[int, float]],
        target: Target,
        where: str,
        params: Sequence[Any],
    ) -> list[tuple[int, float]]:
        """The first ``depth`` of ``ranked`` (owner id, cosine), best first, whose owners pass
        the filters. Owners are looked up a slice at a time, best first: at 1M memories,
        joining every candidate's owner cost more than reading the candidates."""
        depth, table, alias = self.tuning.depth, target.table, target.alias
        kept: list[tuple[int, float]] = []
        for start in range(0, len(ranked), 2 * depth):
            part = ranked[start : start + 2 * depth]
            passing = {
                row[0]
                for row in conn.execute(
                    f"SELECT {alias}.id FROM {table} {alias} NOT INDEXED"
                    f" WHERE {alias}.id IN ({','.join('?' * len(part))}) AND {where}",
                    (*(owner for owner, _ in part), *params),
                )
            }
            kept += [item for item in part if item[0] in passing]
            if len(kept) >= depth:
                break
        return kept[:depth]
