"""The memory server's side of ``copy_profile`` (see copy_sides.py): PostgreSQL's statements,
rows written a chunk at a time as arrays, and float vectors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import numpy as np

from navi_desktop.memory.copy_sides import Side
from navi_desktop.memory.export_format import count_nuls

_CASTS = {"int8": int, "int4": int, "float8": float}


class PgSide(Side):
    kind = "postgres"

    @property
    def where(self) -> str:
        return self.store.where

    async def _load_columns(self, table: str) -> dict[str, str]:
        rows = await self.db.fetchall(
            "SELECT column_name, udt_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
            (table,),
        )
        return {r[0]: r[1] for r in rows}

    async def tables(self) -> set[str]:
        rows = await self.db.fetchall(
            "SELECT table_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND column_name = 'user_id'"
        )
        return {r[0] for r in rows}

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[None]:
        # Other machines' daemons may write meanwhile: every read sees the same moment.
        async with self.db.transaction(snapshot=True):
            yield

    async def scalar(self, text: str, *args: Any) -> Any:
        return await self.db.scalar(text, args)

    async def fetchall(self, text: str, *args: Any) -> list[dict[str, Any]]:
        return [dict(r) for r in await self.db.fetchall(text, args)]

    async def executemany(self, text: str, rows: Sequence[Sequence[Any]]) -> None:
        await self.db.executemany(text, rows)

    def _cast(self, kind: str, value: Any) -> Any:
        cast = _CASTS.get(kind)
        return value if cast is None or value is None else cast(value)

    async def _insert_arrays(
        self,
        table: str,
        rows: list[dict[str, Any]],
        docs: list[tuple[str, str]] | None = None,
        returning: bool = False,
    ) -> list[int]:
        """One statement per chunk, the rows as one array per column: a row-level security
        check and a round trip per row made ``executemany`` ~5x slower. With ``returning``,
        the ids the server's identity gave, in the rows' order (the ordinality orders the
        insert, so the ids, sorted, follow the arrays)."""
        from navi_desktop.memory.pg.store import tsv_sql

        if not rows:
            return []
        types = await self.columns(table)
        names = [c for c in rows[0] if not (returning and c == "id")]
        arrays = [[self._cast(types[c], r[c]) for r in rows] for c in names]
        self.nuls_replaced += count_nuls(arrays)  # the rows' own texts, not their documents
        casts = [f"${i + 1}::{types[c]}[]" for i, c in enumerate(names)]
        picked = [f"t.{c}" for c in names]
        targets, aliases = list(names), list(names)
        if docs is not None:
            n = len(arrays)
            arrays += [[d[0] for d in docs], [d[1] for d in docs]]
            casts += [f"${n + 1}::text[]", f"${n + 2}::text[]"]
            picked.append(tsv_sql(1).replace("$1", "t.doc_a").replace("$2", "t.doc_b"))
            targets.append("tsv")
            aliases += ["doc_a", "doc_b"]
        statement = (
            f"INSERT INTO {table} ({', '.join(targets)}) SELECT {', '.join(picked)}"
            f" FROM unnest({', '.join(casts)}) WITH ORDINALITY AS t({', '.join(aliases)}, ord)"
            " ORDER BY t.ord"
        )
        if not returning:
            await self.db.execute(statement, arrays)
            return []
        ids = sorted(int(r[0]) for r in await self.db.fetchall(f"{statement} RETURNING id", arrays))
        if len(ids) != len(rows):
            raise RuntimeError(f"{table}: wrote {len(ids)} rows of {len(rows)}")
        return ids

    async def insert_plain(self, table: str, rows: list[dict[str, Any]]) -> None:
        await self._insert_arrays(table, rows)

    async def insert(
        self,
        table: str,
        rows: list[dict[str, Any]],
        *,
        docs: list[tuple[str, str]] | None = None,
    ) -> list[int]:
        return await self._insert_arrays(table, rows, docs, returning=True)

    def float_vector(self, row: dict[str, Any]) -> np.ndarray | None:
        vector = row["vector"]
        if hasattr(vector, "to_numpy"):  # pgvector's Vector (newer pgvector), else an array
            vector = vector.to_numpy()
        vec = np.asarray(vector, dtype=np.float32)
        return vec if vec.shape == (int(row["dim"]),) else None

    def stored_vector(self, row: dict[str, Any], source: Side) -> dict[str, Any] | None:
        from pgvector import Vector

        vec = source.float_vector(row)
        # As pgvector's own type: an array of arrays would be read as a 2-d array.
        return None if vec is None else {"vector": Vector(vec)}
