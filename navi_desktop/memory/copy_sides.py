"""How ``copy_profile`` reads one profile and writes another, on either backend: a SQLite file
(``MemoryStore``, here) or a memory server (``PgMemoryStore``, copy_server.py), each through
its own connection API (``store.db``). The copy itself (which table, in which order, which ids
to follow) is in copy_profile.py; these modules only know each backend's SQL and how it keeps
vectors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import numpy as np

from navi_desktop.memory.vectors import int8_codes, sign_bits

CHUNK = 2000  # rows read from the source, and written to the target, at a time
# A component that rounded to 0 in an int8 copy but was positive keeps its sign bit as this
# much (in the copy's units, where the largest component is 127): too little to change a
# cosine or the int8 copy made back from it, so a round trip keeps copy and bits alike.
POSITIVE_ZERO = 0.25
# Columns never copied as they are: the server's own scoping and words index.
DERIVED = {"tsv", "user_id"}
# What the search indexes see for each kind of row (SQLite's FTS table, the server's tsv).
FTS_TABLES = {
    "memories": "memories_fts (rowid, text, evidence)",
    "messages": "messages_fts (rowid, body, context)",
}


class Side:
    """One backend's profile: what the copy reads and writes through."""

    kind = ""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.db = store.db
        self._columns: dict[str, dict[str, str]] = {}
        self.nuls_replaced = 0  # NULs in the rows written, stored as U+FFFD (a server's)

    @property
    def where(self) -> str:
        raise NotImplementedError

    async def _load_columns(self, table: str) -> dict[str, str]:
        raise NotImplementedError

    async def columns(self, table: str) -> dict[str, str]:
        """The table's columns and their types, less those the backend derives."""
        if table not in self._columns:
            found = await self._load_columns(table)
            self._columns[table] = {k: v for k, v in found.items() if k not in DERIVED}
        return self._columns[table]

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[None]:
        """Reads that all see one moment of the profile (the source)."""
        yield

    @asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """One transaction (the target): everything or nothing."""
        async with self.db.transaction():
            yield

    async def tables(self) -> set[str]:
        """The tables that hold a profile's rows."""
        raise NotImplementedError

    # Statements are written with ``?`` placeholders, whatever the backend.
    async def scalar(self, text: str, *args: Any) -> Any:
        raise NotImplementedError

    async def fetchall(self, text: str, *args: Any) -> list[dict[str, Any]]:
        raise NotImplementedError

    async def executemany(self, text: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    async def chunks(
        self, table: str, key: Sequence[str], where: str = "true"
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """The table's rows (matching ``where``) in ``key`` order, CHUNK at a time (keyset
        pages: a profile of a million rows is never held whole)."""
        names = ", ".join(await self.columns(table))
        order = ", ".join(key)
        last: tuple[Any, ...] | None = None
        while True:
            after = "true" if last is None else f"({order}) > ({', '.join('?' * len(key))})"
            rows = await self.fetchall(
                f"SELECT {names} FROM {table} WHERE ({where}) AND {after}"
                f" ORDER BY {order} LIMIT {CHUNK}",
                *(last or ()),
            )
            if not rows:
                return
            yield rows
            last = tuple(rows[-1][k] for k in key)

    async def insert(
        self,
        table: str,
        rows: list[dict[str, Any]],
        *,
        docs: list[tuple[str, str]] | None = None,
    ) -> list[int]:
        """Write ``rows`` (dicts of column values, ``id`` the source's) and, for memories and
        messages, their search documents; returns the ids the rows have here, in order."""
        raise NotImplementedError

    async def insert_plain(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Write rows that nothing refers to by a number the target assigns."""
        if not rows:
            return
        names = list(rows[0])
        marks = ", ".join("?" * len(names))
        await self.executemany(
            f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})",
            [[r[c] for c in names] for r in rows],
        )

    def float_vector(self, row: dict[str, Any]) -> np.ndarray | None:
        """An embedding row's vector as floats; None when the row is damaged."""
        raise NotImplementedError

    def stored_vector(self, row: dict[str, Any], source: Side) -> dict[str, Any] | None:
        """An embedding row's vector columns as this side keeps them; None when damaged."""
        raise NotImplementedError

    async def insert_embeddings(self, rows: list[dict[str, Any]], source: Side) -> int:
        """Write embedding rows read from ``source`` (owners already this side's ids); returns
        how many were left out as damaged."""
        out = []
        for r in rows:
            stored = self.stored_vector(r, source)
            if stored is not None:
                out.append({**{k: v for k, v in r.items() if k not in ("id", "bits")}, **stored})
        await self.insert_plain("embeddings", out)
        return len(rows) - len(out)

    async def memory_ids_used(self) -> int | None:
        """The highest memory id this profile ever gave (forgotten ones included), where its
        ids are its own; None where a server's shared sequence gives them."""
        return None

    async def keep_memory_ids_used(self, used: int) -> None:
        """Never give a memory an id up to ``used`` (the source's ids, kept here)."""

    def forget_caches(self) -> None:
        """Drop anything the store keeps in memory about rows written behind its back."""


class SqliteSide(Side):
    kind = "sqlite"

    @property
    def where(self) -> str:
        return str(self.store.path)

    async def _load_columns(self, table: str) -> dict[str, str]:
        rows = await self.db.fetchall(f"PRAGMA table_info({table})")
        return {r["name"]: r["type"].lower() for r in rows}

    async def tables(self) -> set[str]:
        rows = await self.db.fetchall(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " AND name NOT LIKE '%_fts' AND name NOT LIKE '%_fts_%'"
            " AND name != 'schema_migrations'"
        )
        return {r[0] for r in rows}

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[None]:
        async with self.db.reading():
            await self.db.execute("BEGIN")
            try:
                yield
            finally:
                await self.db.execute("ROLLBACK")

    @asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        async with self.db.transaction():
            # The copy's foreign keys are checked once, at COMMIT: a version chain may name a
            # newer row before it is written.
            await self.db.execute("PRAGMA defer_foreign_keys = ON")
            yield

    async def scalar(self, text: str, *args: Any) -> Any:
        return await self.db.scalar(text, args)

    async def fetchall(self, text: str, *args: Any) -> list[dict[str, Any]]:
        return [dict(r) for r in await self.db.fetchall(text, args)]

    async def executemany(self, text: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            await self.db.executemany(text, rows)

    async def insert(
        self,
        table: str,
        rows: list[dict[str, Any]],
        *,
        docs: list[tuple[str, str]] | None = None,
    ) -> list[int]:
        # The file is new to these rows: they keep the source's ids (unique there, so here).
        await self.insert_plain(table, rows)
        ids = [int(r["id"]) for r in rows]
        if docs:
            await self.executemany(
                f"INSERT INTO {FTS_TABLES[table]} VALUES (?, ?, ?)",
                [(i, *d) for i, d in zip(ids, docs, strict=True)],
            )
        return ids

    def float_vector(self, row: dict[str, Any]) -> np.ndarray | None:
        blob, bits, dim = row["vector"], row["bits"], int(row["dim"])
        if len(blob) == dim * 4:  # a float32 row of a file the doctor has not converted
            return np.frombuffer(blob, dtype=np.float32).copy()
        if len(blob) != dim or len(bits) != (dim + 7) // 8:
            return None
        vec = np.frombuffer(blob, dtype=np.int8).astype(np.float32)
        signs = np.unpackbits(np.frombuffer(bits, dtype=np.uint8), bitorder="little")[:dim]
        vec[(vec == 0) & (signs == 1)] = POSITIVE_ZERO
        return vec

    def stored_vector(self, row: dict[str, Any], source: Side) -> dict[str, Any] | None:
        if source.kind == "sqlite" and len(row["vector"]) == int(row["dim"]):
            return {"vector": row["vector"], "bits": row["bits"]}  # the same layout: as it is
        vec = source.float_vector(row)
        if vec is None:
            return None
        return {"vector": int8_codes(vec)[0].tobytes(), "bits": sign_bits(vec).tobytes()}

    async def memory_ids_used(self) -> int | None:
        return await self.db.scalar("SELECT seq FROM sqlite_sequence WHERE name = 'memories'")

    async def keep_memory_ids_used(self, used: int) -> None:
        # A forgotten memory's id must never name another one (migrations.py, step 0008).
        if await self.db.execute(
            "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'memories'", (used,)
        ):
            return
        await self.db.execute(
            "INSERT INTO sqlite_sequence (name, seq) VALUES ('memories', ?)", (used,)
        )

    def forget_caches(self) -> None:
        # The bit index notices other connections' commits, not this one's.
        self.store._bits = None


def side_of(store: Any) -> Side:
    if getattr(store, "backend", "sqlite") == "postgres":
        from navi_desktop.memory.copy_server import PgSide

        return PgSide(store)
    return SqliteSide(store)
