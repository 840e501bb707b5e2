"""``navi memory doctor --recover``: what can still be read from a damaged file, copied into a
new Navi file beside it. The damaged file is only read.

SQLite's own recovery (the ``sqlite3_recover`` API behind the shell's ``.recover``) is not
in the SQLite that Python can load here (sqlean 3.50 has neither it nor ``sqlite_dbdata``),
so pages.py does what it does: every page of the file is read without SQLite, the rows of
each table's leaf pages are decoded, and each row goes to its table in a new file of the
current schema (rows whose table's pages are lost but whose shape is unmistakable too).
Then the full-text index is built again from the rows, rows that refer to rows that were
lost are left out, and the new file must pass SQLite's integrity check before it is kept.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlean

from navi_desktop.errors import InvalidInput, ProfileError
from navi_desktop.memory.backup import _link_new, _sync_folder
from navi_desktop.memory.documents import memory_document, message_documents
from navi_desktop.memory.filecheck import check_file
from navi_desktop.memory.pages import read_tables
from navi_desktop.stopping import removed_on_stop

SKIP = {"schema_migrations", "sqlite_sequence", "sqlite_stat1", "sqlite_stat4"}
ROLES = {"user", "assistant", "tool", "system"}
KINDS = {"fact", "episode", "rule", "reflection"}


@dataclass
class Salvage:
    source: Path
    target: Path
    copied: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, int] = field(default_factory=dict)  # failed reads per table
    dropped: int = 0  # rows whose parent was lost
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "target": str(self.target),
            "copied": self.copied,
            "unreadable": self.unreadable,
            "dropped": self.dropped,
            "seconds": round(self.seconds, 3),
        }


async def recover(source: Path) -> Salvage:
    """Write ``memory.recovered-<UTC time>.db`` beside ``source`` with what can be read."""
    import asyncio

    from navi_desktop.memory.store import MemoryStore

    source = Path(source)
    try:
        check_file(source, writing=False)
    except ProfileError as exc:
        what = getattr(exc, "what", "")
        if not what.startswith("truncated:"):
            raise InvalidInput(f"nothing can be recovered from {source}: {what or exc}") from None
    started = time.perf_counter()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = source.with_name(f"{source.stem}.recovered-{stamp}.db")
    tmp = source.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    temporaries = (tmp, *(tmp.with_name(tmp.name + s) for s in ("-wal", "-shm")))
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    try:
        with removed_on_stop(*temporaries):  # written in a thread: the signal comes to another
            async with await MemoryStore.open(tmp):  # a fresh file of the current schema
                pass
            result = await asyncio.to_thread(_salvage, source, tmp)
            result.target = target
            await asyncio.to_thread(_link_new, tmp, target)
        _sync_folder(target.parent)
    finally:
        for leftover in temporaries:
            with contextlib.suppress(OSError):
                leftover.unlink()
    result.seconds = time.perf_counter() - started
    return result


def _salvage(source: Path, tmp: Path) -> Salvage:
    result = Salvage(source, tmp)
    try:
        found = read_tables(source)
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"nothing can be recovered from {source}: {exc}") from None
    dst = sqlean.connect(str(tmp), isolation_level=None)
    try:
        dst.execute("PRAGMA foreign_keys = OFF")
        dst.execute("BEGIN")
        tables = dict(_tables(dst))
        rows = {name: list(found.by_table.get(name, [])) for name in tables}
        placed = 0
        for rowid, values in found.orphans:
            name = _guess(values, tables)
            if name is not None:
                rows[name].append((rowid, values))
                placed += 1
        for name, columns in tables.items():
            _insert(dst, name, columns, rows[name])
        lost = len(found.orphans) - placed + found.bad_cells
        if lost:
            result.unreadable["rows"] = lost
        if found.missing_pages:
            result.unreadable["pages past the end"] = found.missing_pages
        _sequences(dst, found.by_table.get("sqlite_sequence", []))
        result.dropped = _drop_orphans(dst)
        for name in tables:
            result.copied[name] = dst.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
        result.copied["meta"] = len(rows.get("meta", []))  # not the new file's own rows
        _reindex(dst)
        dst.execute("COMMIT")
        check = dst.execute("PRAGMA integrity_check").fetchone()[0]
        if check != "ok":  # never hand over a file that is itself damaged
            raise InvalidInput(f"the recovered copy failed its own check ({check}); nothing kept")
    finally:
        dst.close()
    if not any(result.copied.values()):
        raise InvalidInput(
            f"nothing can be recovered from {source}: no row of a Navi table could be read"
        )
    return result


def _tables(dst: sqlean.Connection) -> list[tuple[str, list[tuple[str, bool]]]]:
    """Navi's ordinary tables (not the full-text index's own) and their columns, each with
    whether it is the rowid's alias (stored as NULL in the record)."""
    rows = dst.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'table'").fetchall()
    fts = [r[0] for r in rows if "VIRTUAL TABLE" in (r[1] or "").upper()]
    out = []
    for name, _ in rows:
        if name in SKIP or name in fts or name.startswith("sqlite_"):
            continue
        if any(name.startswith(f + "_") for f in fts):
            continue
        info = dst.execute(f'PRAGMA table_info("{name}")').fetchall()
        alias = [c[1] for c in info if c[5] == 1 and str(c[2]).upper() == "INTEGER"]
        single = len([c for c in info if c[5]]) == 1
        out.append((name, [(c[1], single and c[1] in alias) for c in info]))
    return out


def _insert(
    dst: sqlean.Connection, table: str, columns: list[tuple[str, bool]], rows: list[Any]
) -> None:
    """Insert rows decoded from a record: older rows may have fewer values (columns added
    later take their defaults); a row that breaks a constraint is skipped."""
    verb = "INSERT OR REPLACE" if table == "meta" else "INSERT OR IGNORE"  # its secret wins
    for rowid, values in rows:
        width = min(len(values), len(columns))
        if width == 0:
            continue
        names = ", ".join(f'"{c}"' for c, _ in columns[:width])
        marks = ", ".join("?" * (width + 1))
        row = [rowid if alias else v for (_, alias), v in zip(columns, values, strict=False)]
        with contextlib.suppress(sqlean.Error):
            dst.execute(f'{verb} INTO "{table}" (rowid, {names}) VALUES ({marks})', [rowid, *row])


def _guess(values: list[Any], tables: dict[str, list[tuple[str, bool]]]) -> str | None:
    """The table an orphan row surely belongs to, by its shape; None when unsure."""
    n = len(values)

    def text(i: int) -> bool:
        return i < n and isinstance(values[i], str)

    candidates = [name for name, cols in tables.items() if len(cols) == n]
    if "messages" in candidates and text(2) and values[2] in ROLES:
        return "messages"
    if "memories" in candidates and text(1) and values[1] in KINDS:
        return "memories"
    if "embeddings" in candidates and isinstance(values[6] if n > 6 else None, bytes):
        return "embeddings"
    if "sessions" in candidates and text(4) and values[4] in {"open", "pending", "ended"}:
        return "sessions"
    return None


def _sequences(dst: sqlean.Connection, rows: list[tuple[int, list[Any]]]) -> None:
    """An id handed out once is never handed out again (AUTOINCREMENT): keep the file's marks."""
    for _, values in rows:
        if len(values) >= 2 and isinstance(values[0], str) and isinstance(values[1], int):
            dst.execute(
                "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?",
                (values[1], values[0]),
            )
            if not dst.execute(
                "SELECT 1 FROM sqlite_sequence WHERE name = ?", (values[0],)
            ).fetchone():
                with contextlib.suppress(sqlean.Error):
                    dst.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", values[:2])


def _drop_orphans(dst: sqlean.Connection) -> int:
    """Rows that name a row that was lost (a message of a lost session) go too."""
    dropped = 0
    for _ in range(10):  # a dropped parent can orphan its children: a few rounds
        broken = dst.execute("PRAGMA foreign_key_check").fetchall()
        if not broken:
            break
        for table, rowid, _parent, _fk in broken:
            if rowid is not None:
                dropped += dst.execute(f'DELETE FROM "{table}" WHERE rowid = ?', (rowid,)).rowcount
    return dropped


def _reindex(dst: sqlean.Connection) -> None:
    """The full-text index, built again from the rows (it holds no text of its own)."""
    dst.row_factory = sqlean.Row
    for row in dst.execute("SELECT * FROM memories").fetchall():
        dst.execute(
            "INSERT INTO memories_fts (rowid, text, evidence) VALUES (?, ?, ?)",
            (row["id"], *memory_document(row)),
        )
    previous = None
    for row in dst.execute("SELECT * FROM messages ORDER BY session_id, id").fetchall():
        if previous is not None and previous["session_id"] != row["session_id"]:
            previous = None
        dst.execute(
            "INSERT INTO messages_fts (rowid, body, context) VALUES (?, ?, ?)",
            (row["id"], *message_documents(row, previous)),
        )
        previous = row
    dst.row_factory = None
