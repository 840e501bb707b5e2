"""The vector signal of hybrid search: the 1-bit index's candidates (vectors.py), re-ranked by
the float query's cosine with their stored int8 copies, then filtered."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlean

from navi_desktop.memory import hamming
from navi_desktop.memory.connections import ReadPool
from navi_desktop.memory.search_filters import Filters, Target
from navi_desktop.memory.vectors import Codes, Scanned, cosines, sign_bits

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore

Key = tuple[str, int]  # ("memory" | "message", id)
# From this many codes the scan is split across the read threads (see _scanned). At 1M codes
# it made searches ~10 ms faster at p50 with either scan (compiled 38 against 46 ms, numpy 53
# against 64); at 100k, where numpy scans in ~2 ms, BM25 starting later cost more (p50 +2 ms).
SPLIT_MIN = 200_000


class VectorSearchOps:
    async def _codes(self: MemoryStore, vector: Any) -> Codes | None:
        """The coarse index's codes as they are now, when they can answer ``vector``."""
        if vector is None:
            return None
        async with self.db.reading():
            index = await self._bit_index(len(vector))
        if index is None or index.dim != len(vector):
            return None
        codes = index.snapshot()
        return codes if len(codes) else None

    async def _scanned(self: MemoryStore, codes: Codes, vector: Any, f: Filters) -> Scanned | None:
        """The query's Hamming distances on a large index, scanned in parts on every read
        thread before the other signals start (None on a small one: _knn scans it). Scanned
        inside the vector signal, the scan shared the cores with BM25; first and in parts, it
        has them both (at 1M codes: 10 ms against 12 ms on one thread, the memory bus being
        the limit), and the other signals then overlap the rest of the vector signal. Both
        owners' codes are scanned once when both are searched."""
        if len(codes) < SPLIT_MIN:
            return None
        owners = {target.owner for target, _, _ in f.targets()}
        owner = owners.pop() if len(owners) == 1 else None
        query = codes.query_words(sign_bits(vector).tobytes())
        dist = np.empty(len(codes), dtype=np.uint16)
        await asyncio.gather(
            *(
                self.db.read(lambda _conn, part=part: codes.scan_part(query, owner, dist, part))
                for part in hamming.parts(len(codes), ReadPool.SIZE)
            )
        )
        return Scanned(dist, owner)

    def _knn(
        self: MemoryStore,
        codes: Codes,
        vector: Any,
        f: Filters,
        scanned: Scanned | None,
        conn: sqlean.Connection,
    ) -> list[tuple[Key, float]]:
        """A plain function of a read connection, run in a worker thread (see search)."""
        t = self.tuning
        query_bits = sign_bits(vector).tobytes()
        query = np.asarray(vector, dtype=np.float32)
        wanted = max(t.rerank, int(len(codes) * t.rerank_share))
        hits: list[tuple[Key, float]] = []
        for target, where, params in f.targets():
            ids = codes.candidates(query_bits, wanted, target.owner, query, scanned)
            if not ids:
                continue
            # By primary key only (NOT INDEXED): left to itself, the planner may scan through
            # another index (without ANALYZE statistics it did: ~50 ms at 100k memories).
            rows = conn.execute(
                f"SELECT {target.column}, vector FROM embeddings NOT INDEXED"
                f" WHERE id IN ({','.join('?' * len(ids))})",
                ids,
            ).fetchall()
            sims = cosines(query, [row[1] for row in rows], hamming.compiled(len(codes)))
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
