"""Reading the rows of a SQLite file page by page, without SQLite: the approach of SQLite's
own recovery (``sqlite3_recover``, the shell's ``.recover``), which the SQLite that Python
loads here does not include.

Every page is read from the file (and from its WAL's committed frames, which are newer);
b-tree pages are recognised by their header, and each table leaf's rows are decoded from the
record format. A leaf belongs to the table whose root its parents lead to; the roots come
from the schema table (page 1's tree) as far as it can be read. A leaf whose way up is lost
is an orphan: ``TableRows.orphans`` keeps its rows for the caller to place by their shape.
Anything that does not parse is skipped and counted: a damaged page costs its own rows only.
Only reads: the file is opened read-only and never handed to SQLite.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INTERIOR_TABLE, LEAF_TABLE = 5, 13
WAL_HEADER, FRAME_HEADER = 32, 24


@dataclass
class TableRows:
    by_table: dict[str, list[tuple[int, list[Any]]]] = field(default_factory=dict)
    orphans: list[tuple[int, list[Any]]] = field(default_factory=list)
    bad_cells: int = 0  # cells or pages that could not be decoded
    missing_pages: int = 0  # pages a tree points to that are past the end of the file


class PageReader:
    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        head = os.pread(self.fd, 100, 0)
        size = int.from_bytes(head[16:18], "big")
        self.page_size = 65536 if size == 1 else size
        if self.page_size < 512 or self.page_size & (self.page_size - 1):
            raise ValueError(f"not a valid page size: {self.page_size}")
        self.usable = self.page_size - head[20]
        self.pages = os.fstat(self.fd).st_size // self.page_size
        self.wal = _wal_pages(Path(str(path) + "-wal"), self.page_size)
        if self.wal:
            self.pages = max(self.pages, max(self.wal))

    def close(self) -> None:
        os.close(self.fd)

    def page(self, n: int) -> bytes | None:
        if n in self.wal:
            return self.wal[n]
        if n < 1 or n > self.pages:
            return None
        data = os.pread(self.fd, self.page_size, (n - 1) * self.page_size)
        return data if len(data) == self.page_size else None

    # -- b-tree pages ------------------------------------------------------------------------

    def kind(self, n: int) -> int | None:
        page = self.page(n)
        return None if page is None else page[100 if n == 1 else 0]

    def children(self, n: int) -> list[int]:
        """An interior table page's child page numbers."""
        page = self.page(n)
        off = 100 if n == 1 else 0
        if page is None or page[off] != INTERIOR_TABLE:
            return []
        count = int.from_bytes(page[off + 3 : off + 5], "big")
        out = [int.from_bytes(page[off + 8 : off + 12], "big")]
        for i in range(count):
            ptr = int.from_bytes(page[off + 12 + 2 * i : off + 14 + 2 * i], "big")
            if ptr + 4 <= len(page):
                out.append(int.from_bytes(page[ptr : ptr + 4], "big"))
        return [c for c in out if 1 <= c <= max(self.pages, 1) * 2]

    def leaf_rows(self, n: int, result: TableRows) -> list[tuple[int, list[Any]]]:
        """The (rowid, values) of a table leaf page's cells; bad cells are counted."""
        page = self.page(n)
        off = 100 if n == 1 else 0
        if page is None or page[off] != LEAF_TABLE:
            return []
        count = int.from_bytes(page[off + 3 : off + 5], "big")
        rows = []
        for i in range(min(count, self.page_size // 4)):
            try:
                ptr = int.from_bytes(page[off + 8 + 2 * i : off + 10 + 2 * i], "big")
                size, pos = _varint(page, ptr)
                rowid, pos = _varint(page, pos)
                payload = self._payload(page, pos, size)
                rows.append((_signed(rowid), _record(payload)))
            except (IndexError, ValueError, struct.error):
                result.bad_cells += 1
        return rows

    def _payload(self, page: bytes, pos: int, size: int) -> bytes:
        u = self.usable
        most = u - 35
        if size <= most:
            data = page[pos : pos + size]
        else:
            least = (u - 12) * 32 // 255 - 23
            local = least + (size - least) % (u - 4)
            local = local if local <= most else least
            parts = [page[pos : pos + local]]
            nxt = int.from_bytes(page[pos + local : pos + local + 4], "big")
            seen: set[int] = set()
            remaining = size - local
            while remaining > 0:
                over = self.page(nxt) if nxt not in seen else None
                if over is None:
                    raise ValueError("overflow chain broken")
                seen.add(nxt)
                parts.append(over[4 : 4 + min(remaining, u - 4)])
                remaining -= u - 4
                nxt = int.from_bytes(over[:4], "big")
            data = b"".join(parts)
        if len(data) != size:
            raise ValueError("short payload")
        return data


def read_tables(path: Path) -> TableRows:
    """Every row the file still holds, by table name (from its schema), plus orphans."""
    reader = PageReader(path)
    result = TableRows()
    try:
        roots = _schema_roots(reader, result)
        parent: dict[int, int] = {}
        leaves: list[int] = []
        for n in range(1, reader.pages + 1):
            kind = reader.kind(n)
            if kind == INTERIOR_TABLE:
                for child in reader.children(n):
                    if child > reader.pages:
                        result.missing_pages += 1
                    parent.setdefault(child, n)
            elif kind == LEAF_TABLE:
                leaves.append(n)
        for leaf in leaves:
            if leaf == 1:
                continue  # the schema itself
            top, seen = leaf, {leaf}
            while top in parent and parent[top] not in seen:
                top = parent[top]
                seen.add(top)
            rows = reader.leaf_rows(leaf, result)
            name = roots.get(top)
            if name is None:
                result.orphans.extend(rows)
            elif name != "sqlite_schema":
                result.by_table.setdefault(name, []).extend(rows)
    finally:
        reader.close()
    return result


def _schema_roots(reader: PageReader, result: TableRows) -> dict[int, str]:
    """Root page -> table name, from the schema table's pages that can still be read."""
    roots = {1: "sqlite_schema"}
    stack, seen = [1], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        kind = reader.kind(n)
        if kind == INTERIOR_TABLE:
            stack.extend(reader.children(n))
        elif kind == LEAF_TABLE:
            for _, values in reader.leaf_rows(n, result):
                if len(values) >= 4 and values[0] == "table" and isinstance(values[3], int):
                    roots[values[3]] = str(values[1])
    for n in seen:
        roots.setdefault(n, "sqlite_schema")
    return roots


def _wal_pages(wal: Path, page_size: int) -> dict[int, bytes]:
    """The newest committed image of each page in the WAL (frames of its current salt)."""
    try:
        data = wal.read_bytes()
    except OSError:
        return {}
    if len(data) < WAL_HEADER or int.from_bytes(data[8:12], "big") != page_size:
        return {}
    salt = data[16:24]
    pages: dict[int, bytes] = {}
    pending: dict[int, bytes] = {}
    pos = WAL_HEADER
    while pos + FRAME_HEADER + page_size <= len(data):
        header = data[pos : pos + FRAME_HEADER]
        if header[8:16] != salt:
            break
        number = int.from_bytes(header[:4], "big")
        pending[number] = data[pos + FRAME_HEADER : pos + FRAME_HEADER + page_size]
        if int.from_bytes(header[4:8], "big"):  # a commit: the frames so far count
            pages.update(pending)
            pending = {}
        pos += FRAME_HEADER + page_size
    return pages


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for i in range(9):
        byte = buf[pos + i]
        if i == 8:
            return (value << 8) | byte, pos + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos + i + 1
    raise ValueError("bad varint")  # pragma: no cover


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


_INT_SIZES = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}


def _record(payload: bytes) -> list[Any]:
    header_size, pos = _varint(payload, 0)
    if header_size > len(payload):
        raise ValueError("bad record header")
    types = []
    while pos < header_size:
        serial, pos = _varint(payload, pos)
        types.append(serial)
    values: list[Any] = []
    pos = header_size
    for serial in types:
        if serial == 0:
            values.append(None)
        elif serial in _INT_SIZES:
            width = _INT_SIZES[serial]
            values.append(int.from_bytes(payload[pos : pos + width], "big", signed=True))
            pos += width
        elif serial == 7:
            values.append(struct.unpack(">d", payload[pos : pos + 8])[0])
            pos += 8
        elif serial in (8, 9):
            values.append(serial - 8)
        elif serial >= 12:
            length = (serial - 12) // 2
            chunk = payload[pos : pos + length]
            if len(chunk) != length:
                raise ValueError("short value")
            values.append(chunk.decode("utf-8", "replace") if serial % 2 else bytes(chunk))
            pos += length
        else:
            raise ValueError("reserved serial type")
    return values
