"""``navi memory doctor``: check a profile's file and say what is wrong and what to do.

The doctor opens the file read-only itself (never through the daemon, so it works while the
daemon holds the profile in an error state, and never writes the file nor creates anything
beside it when no WAL exists). It checks, in order: the file (present, readable, a whole
SQLite file), that it is Navi's and of a schema this version knows, SQLite's
``integrity_check`` (which, since SQLite 3.44, runs FTS5's own 'integrity-check' on the
full-text indexes), the vectors against their rows, the WAL's size, the free space, the
permissions, and which backups exist. Only a failed integrity check calls a file damaged.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlean

from navi_desktop.errors import ProfileDamaged, ProfileError
from navi_desktop.memory import hamming
from navi_desktop.memory.backup import survey
from navi_desktop.memory.failures import (
    READ_ONLY_FIX,
    free_bytes,
    megabytes,
    on_read_only_fs,
    unreachable,
)
from navi_desktop.memory.filecheck import APPLICATION_ID, check_file, read_only, wal_path
from navi_desktop.memory.migrations import MIGRATIONS, schema_version
from navi_desktop.paths import profile_option

OK, NOTE, WARNING, PROBLEM = "ok", "note", "warning", "problem"
WAL_WARN_BYTES = 256 << 20
LOW_DISK_BYTES = 100 << 20
INTEGRITY_LINES = 20
FTS_WORDS = ("fts5", "inverted index", "_fts")


@dataclass
class Finding:
    check: str  # "file", "integrity", "full-text index", "schema", "vectors", ...
    level: str  # ok, note, warning, problem
    text: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "level": self.level, "text": self.text, "fix": self.fix}


@dataclass
class Report:
    path: Path
    findings: list[Finding] = field(default_factory=list)
    backups: list[Path] = field(default_factory=list)
    unusable: list[tuple[Path, str]] = field(default_factory=list)  # backups/ entries, why
    damaged: bool = False  # the integrity check (or the file's header) says so
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(f.level == PROBLEM for f in self.findings)

    def add(self, check: str, level: str, text: str, fix: str | None = None) -> None:
        self.findings.append(Finding(check, level, text, fix))

    def advice(self) -> list[str]:
        """What to do, in order, when something is wrong."""
        if self.ok:
            return []
        option = profile_option(self.path)
        out = [f.fix for f in self.findings if f.level == PROBLEM and f.fix]
        if self.damaged:
            out.append(
                f"recover what can be read into a new file beside it (the damaged file is not"
                f" changed): `navi memory doctor{option} --recover`"
            )
            restore = _restore_fix(self)
            if restore is not None and restore not in out:
                out.append(f"or {restore}")
        return list(dict.fromkeys(out))

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "ok": self.ok,
            "damaged": self.damaged,
            "findings": [f.to_dict() for f in self.findings],
            "advice": self.advice(),
            "counts": self.counts,
            "backups": [str(p) for p in self.backups],
        }


def examine(path: Path) -> Report:
    """Check the file at ``path`` (a thread's work: the integrity check reads all of it)."""
    path = Path(path)
    whole, unusable = survey(path)
    report = Report(path, backups=whole, unusable=unusable)
    try:
        os.lstat(path)
    except PermissionError:  # a folder above it cannot be searched: nothing here can be checked
        raise unreachable(path) from None
    except (FileNotFoundError, NotADirectoryError):
        report.add("file", PROBLEM, f"no memory file at {path}", "check the profile's name")
        return report
    truncated = False
    try:
        check_file(path, writing=False)
    except ProfileError as exc:
        what = getattr(exc, "what", str(exc))
        if isinstance(exc, ProfileDamaged):
            report.damaged = True
            truncated = what.startswith("truncated") and "bytes its header" in what
            fix = None if truncated else _restore_fix(report) or "nothing in it can be read"
            report.add("file", PROBLEM, f"damaged: {what}", fix)
        else:
            report.add("file", PROBLEM, str(exc))
        if not truncated:
            _environment(report)
            return report
    else:
        report.add("file", OK, f"a SQLite file of {_size(path.stat().st_size)}")
    try:
        conn = read_only(path)
    except sqlean.Error as exc:
        report.add("file", PROBLEM, f"SQLite cannot open it: {exc}", _restore_fix(report))
        report.damaged = True
        return report
    except ProfileError as exc:  # another database's log beside it (filecheck.check_log)
        report.add("file", PROBLEM, str(exc))
        return report
    try:
        if truncated:  # read what the file still holds instead of refusing it whole
            conn.execute("PRAGMA writable_schema = ON")
        if _schema(conn, report):
            _integrity(conn, report)
            if not report.damaged:
                _vectors(conn, report)
                _counts(conn, report)
    except sqlean.Error as exc:
        report.damaged = True
        report.add("integrity", PROBLEM, f"SQLite stopped reading it: {exc}")
    finally:
        conn.close()
    _environment(report)
    return report


def _schema(conn: sqlean.Connection, report: Report) -> bool:
    """Navi's file, of a schema this version knows? False: go no further."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    if app_id != APPLICATION_ID:
        if not tables and on_read_only_fs(report.path):  # nothing can set it up there
            report.add(
                "schema",
                PROBLEM,
                "an empty file (a new profile), which Navi cannot set up on a read-only file"
                " system",
                f"{READ_ONLY_FIX}, and Navi sets it up by itself",
            )
            return False
        if not tables:
            report.add("schema", NOTE, "an empty file: Navi sets it up when it first opens it")
            return False
        report.add(
            "schema",
            PROBLEM,
            "a SQLite database, but not a Navi memory file",
            "use another profile (--profile NAME), or move that file to where it belongs",
        )
        return False
    known = [name for name, _ in MIGRATIONS]
    recorded = (
        [r[0] for r in conn.execute("SELECT name FROM schema_migrations")]
        if "schema_migrations" in tables
        else []
    )
    newer = sorted(set(recorded) - set(known))
    version, latest = schema_version(recorded), schema_version(known)
    if newer:
        report.add(
            "schema",
            PROBLEM,
            f"written by a newer Navi (schema {version}; this version knows up to {latest})",
            "update Navi to use this profile; this version does not change the file",
        )
        return True  # still worth checking: read-only
    missing = [n for n in known if n not in recorded]
    if missing:
        report.add("schema", NOTE, f"schema {version}: upgraded to {latest} when Navi opens it")
    else:
        report.add("schema", OK, f"schema {version}, the current one")
    return True


def _integrity(conn: sqlean.Connection, report: Report) -> None:
    lines = [r[0] for r in conn.execute(f"PRAGMA integrity_check({INTEGRITY_LINES})")]
    lines = [piece for line in lines for piece in str(line).splitlines() if piece.strip()]
    if lines == ["ok"]:
        report.add("integrity", OK, "SQLite's integrity check passed")
        report.add("full-text index", OK, "FTS5's integrity check passed")
        return
    fts = [line for line in lines if any(w in line.lower() for w in FTS_WORDS)]
    other = [line for line in lines if line not in fts and not line.startswith("***")]
    report.damaged = True
    if other:
        shown = "; ".join(other[:3]) + (f" (and {len(other) - 3} more)" if len(other) > 3 else "")
        report.add("integrity", PROBLEM, f"SQLite's integrity check failed: {shown}")
    else:
        report.add("integrity", OK, "SQLite's integrity check passed, but for the full-text index")
    if fts:
        report.add(
            "full-text index",
            PROBLEM,
            f"FTS5's integrity check failed: {'; '.join(fts[:2])}",
            "the index is rebuilt from the memories in the file `--recover` writes",
        )
    else:
        report.add("full-text index", OK, "FTS5's integrity check passed")


def _vectors(conn: sqlean.Connection, report: Report) -> None:
    # A vector is an int8 copy (dim bytes) from step 0013 on, float32 before it (vectors.py).
    int8 = conn.execute("SELECT 1 FROM schema_migrations WHERE name = '0013_int8_vectors'")
    size = "dim" if int8.fetchone() else "dim * 4"
    rows = conn.execute(
        f"SELECT model, dim, count(*), sum(length(vector) != {size}"
        " OR length(bits) != (dim + 7) / 8),"
        " sum(memory_id IS NOT NULL AND memory_id NOT IN (SELECT id FROM memories)),"
        " sum(message_id IS NOT NULL AND message_id NOT IN (SELECT id FROM messages))"
        " FROM embeddings GROUP BY model, dim"
    ).fetchall()
    if not rows:
        report.add("vectors", NOTE, "no vectors (search is by text until they are made)")
        return
    models: dict[str, list[int]] = {}
    for model, dim, count, bad, orphan_memories, orphan_messages in rows:
        models.setdefault(model, []).append(dim)
        if bad:
            report.add(
                "vectors",
                PROBLEM,
                f"{bad} of {count} vectors of {model} do not have {dim} dimensions",
                "`--recover` keeps the memories; their vectors are made again",
            )
        if orphan_memories or orphan_messages:
            report.add(
                "vectors",
                WARNING,
                f"{orphan_memories + orphan_messages} vectors of {model} belong to nothing",
                "`--recover` leaves them out",
            )
    for model, dims in models.items():
        if len(dims) > 1:
            _sizes(report, model, {r[1]: r[2] for r in rows if r[0] == model})
    missing = conn.execute(
        "SELECT count(*) FROM memories m WHERE status IN ('active', 'held') AND NOT EXISTS"
        " (SELECT 1 FROM embeddings e WHERE e.memory_id = m.id)"
    ).fetchone()[0]
    total = sum(r[2] for r in rows)
    text = f"{total} vectors ({', '.join(sorted(models))})"
    if missing:
        text += f"; {missing} memories wait for theirs (the daemon makes them)"
    if not any(f.check == "vectors" and f.level != OK for f in report.findings):
        report.add("vectors", OK, text)
    largest = max(r[2] for r in rows)
    if largest >= hamming.KERNEL_MIN and not hamming.installed():
        report.add(
            "vectors",
            NOTE,
            f"{largest:,} vectors of one model: the compiled vector scan would make search"
            " faster (1M memories: 53 → 38 ms at p50)",
            "install the `fast` extra (numba): pip install 'navi-desktop[fast]'",
        )


def _sizes(report: Report, model: str, counts: dict[int, int]) -> None:
    """A model's vectors of several sizes. Search by meaning uses the size the model gives
    now and the embedding pass makes the others again; the doctor does not ask the model,
    so it cannot say which size that is (the newest vector may be the odd one)."""
    sizes = ", ".join(f"{n:,} of {dim}" for dim, n in sorted(counts.items()))
    report.add(
        "vectors",
        WARNING,
        f"{model} has vectors of {len(counts)} sizes ({sizes} dimensions): search by meaning"
        " uses the size the model gives now and leaves the others out",
        f"the embedding pass makes them again at the size {model} gives now (the daemon does,"
        " in the background)",
    )


def _counts(conn: sqlean.Connection, report: Report) -> None:
    for table in ("memories", "sessions", "messages"):
        report.counts[table] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    pending = conn.execute("SELECT count(*) FROM sessions WHERE state = 'pending'").fetchone()[0]
    if pending:
        report.add("sessions", NOTE, f"{pending} sessions wait to be learned from (retried)")


def _environment(report: Report) -> None:
    path = report.path
    wal = wal_path(path)
    if wal.exists():
        size = wal.stat().st_size
        if size > WAL_WARN_BYTES:
            report.add(
                "wal",
                WARNING,
                f"the write-ahead log is {_size(size)}",
                "it is folded into the file as the daemon writes and when it stops; if it keeps"
                " growing, another program holds the file open: close it",
            )
        else:
            report.add("wal", OK, f"write-ahead log {_size(size)}")
    free = free_bytes(path.parent)
    if on_read_only_fs(path):
        report.add(
            "disk",
            WARNING,
            "its file system is read-only: memories can be read, but nothing is saved",
            READ_ONLY_FIX,
        )
    elif free is not None and free < LOW_DISK_BYTES:
        report.add(
            "disk",
            WARNING,
            f"disk almost full: {megabytes(free)} MB free in {path.parent}",
            "free some space: on a full disk Navi keeps what it has but cannot save more",
        )
    elif free is not None:
        report.add("disk", OK, f"{megabytes(free)} MB free")
    _permissions(report)
    if report.backups:
        report.add("backups", OK, f"{len(report.backups)}, the latest {report.backups[0].name}")
    else:
        report.add(
            "backups", NOTE, "none yet", f"make one: `navi memory backup{profile_option(path)}`"
        )
    for entry, why in report.unusable:  # left out of the count above and of any advice
        report.add("backups", WARNING, f"{entry.name}: {why}", f"delete it: `rm {entry}`")


def _permissions(report: Report) -> None:
    path = report.path
    if not path.is_file():  # not a memory file (`--file /dev/null`): its folder is not ours
        return
    for target, wanted in ((path.parent, 0o700), (path, 0o600)):
        try:
            st = target.stat()
        except OSError:
            continue
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid != os.getuid():
            report.add("permissions", WARNING, f"{target} belongs to uid {st.st_uid}, not to you")
        elif mode & 0o077:
            report.add(
                "permissions",
                WARNING,
                f"{target} is readable by others (mode {mode:04o})",
                f"`chmod {wanted:o} {target}` (Navi does this when it opens a healthy file)",
            )


def _restore_fix(report: Report) -> str | None:
    if not report.backups:
        return None
    return (
        f"go back to the latest backup: `navi memory restore {report.backups[0]}"
        f"{profile_option(report.path)}`"
    )


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n} bytes"
