"""``navi memory restore FILE``: a profile's file replaced by a backup, or by what the doctor
recovered, never half.

The backup is checked first (a whole Navi file, of a schema this version knows, that passes
SQLite's integrity check); a bad one changes nothing. It is copied beside the profile's file
under a temporary name, the current file is kept as ``memory.before-restore-<UTC time>.db``
(with its WAL, if any), and one rename puts the copy in place: at every moment the profile's
path holds either the old file or the new one. The daemon closes the profile first.

What the current file forgot after the backup was made is forgotten again in the copy before
it goes in place (``forget_again``): before, restoring an older backup brought forgotten
memories back without a word, while an import of the same memories was refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlean

from navi_desktop.errors import DiskFull, InvalidInput, NaviError, ProfileError
from navi_desktop.fileio import writing_in
from navi_desktop.memory.backup import (
    RESERVE_BYTES,
    _sync_folder,
    copy_database,
    incoming_name,
    remove_leftovers,
)
from navi_desktop.memory.failures import free_bytes, megabytes
from navi_desktop.memory.filecheck import APPLICATION_ID, check_file, identity, probe, read_only
from navi_desktop.memory.matching import json_texts, phrase_forms, phrases
from navi_desktop.memory.migrations import check_schema
from navi_desktop.memory.scrub import PENDING_KEY
from navi_desktop.memory.scrub_plan import TEXT_COLUMNS
from navi_desktop.memory.textproc import keyed_hash
from navi_desktop.paths import ensure_private_dir

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Restored:
    path: Path
    source: Path
    side_copy: Path | None
    memories: int
    forgotten_again: int = 0  # memories the current file had forgotten since the backup
    redacted_again: int = 0  # messages that still said what it had forgotten
    not_compared: str | None = None  # why the current file's forgets could not be read

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "restored_from": str(self.source),
            "side_copy": str(self.side_copy) if self.side_copy else None,
            "memories": self.memories,
            "forgotten_again": self.forgotten_again,
            "redacted_again": self.redacted_again,
            "not_compared": self.not_compared,
        }


def check_backup(backup: Path) -> int:
    """Refuse a file that would not make a working profile; returns its memories' count."""
    backup = Path(backup)
    refuse = f"{backup} cannot be restored"
    if not backup.exists():  # a folder or a named pipe: check_file says which
        raise InvalidInput(f"{refuse}: no such file")
    try:
        if not check_file(backup, writing=False):
            raise InvalidInput(f"{refuse}: it is empty; nothing was changed")
        probe(backup, check_schema)
    except ProfileError as exc:
        raise InvalidInput(f"{refuse}: {getattr(exc, 'what', exc)}; nothing was changed") from None
    conn = read_only(backup)
    try:
        if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
            raise InvalidInput(f"{refuse}: it is not a Navi memory file; nothing was changed")
        result = conn.execute("PRAGMA integrity_check(5)").fetchone()[0]
        if result != "ok":
            raise InvalidInput(
                f"{refuse}: it fails SQLite's integrity check ({result}); nothing was changed"
            )
        return int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])
    except sqlean.Error as exc:
        raise InvalidInput(f"{refuse}: SQLite cannot read it ({exc}); nothing was changed") from exc
    finally:
        conn.close()


def restore_file(backup: Path, path: Path) -> Restored:
    """Put a copy of ``backup`` at ``path`` (nothing may have ``path`` open), less what the
    current file forgot since. Blocking (a thread's work: it runs its own event loop)."""
    backup, path = Path(backup).absolute(), Path(path)
    memories = check_backup(backup)
    ensure_private_dir(path.parent)
    need = backup.stat().st_size + RESERVE_BYTES
    free = free_bytes(path.parent)
    if free is not None and free < need:
        raise DiskFull(
            f"not enough space to restore: {megabytes(free)} MB free in {path.parent},"
            f" about {megabytes(need)} MB needed; nothing was changed"
        )
    remove_leftovers(path)  # what a killed restore or backup left: a full copy each
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    wal, shm = (path.with_name(path.name + s) for s in ("-wal", "-shm"))
    incoming = incoming_name(path)
    temporaries = (incoming, *(incoming.with_name(incoming.name + s) for s in SIDES))
    with writing_in(path.parent, *temporaries):  # their names are no leftovers meanwhile
        side: Path | None = None
        side_wal: Path | None = None
        try:
            copy_database(backup, incoming, checked=True)  # check_backup's integrity check
            again = forget_again(incoming, path)
            if path.exists():
                side = path.with_name(f"{path.stem}.before-restore-{stamp}.db")
                os.link(path, side)
                if wal.exists() and wal.stat().st_size > 0:
                    side_wal = side.with_name(side.name + "-wal")
                    os.link(wal, side_wal)  # the WAL belongs with its file: kept together
            # The old file's WAL and index must not be applied to the new one.
            for stale in (wal, shm):
                with contextlib.suppress(FileNotFoundError):
                    stale.unlink()
            os.replace(incoming, path)
        except BaseException:
            for leftover in temporaries:
                with contextlib.suppress(OSError):
                    leftover.unlink()
            if side_wal is not None and not wal.exists():
                with contextlib.suppress(OSError):
                    os.link(side_wal, wal)
            raise
    _sync_folder(path.parent)
    return Restored(path, backup, side, memories - again.forgotten, *again.result())


# -- what the current file forgot since the backup was made --------------------------------------

SIDES = ("-journal", "-wal", "-shm")
PAGE = 2000  # messages read at a time
Forgets = tuple[str, list[Any], list[Any]]  # tombstone key, tombstones, forgotten phrases


@dataclass
class Again:
    """The forgets a restore applies again to its copy, found by the current file's keyed
    hashes (as an import finds what it must not bring back): never text."""

    everywhere: list[int] = field(default_factory=list)  # memories forgotten with every mention
    evidence: list[int] = field(default_factory=list)  # forgotten with their quotes only
    phrases: set[str] = field(default_factory=set)  # forgotten words found in the copy's texts
    forgotten: int = 0
    redacted: int = 0
    not_compared: str | None = None

    def result(self) -> tuple[int, int, str | None]:
        return self.forgotten, self.redacted, self.not_compared


def forget_again(incoming: Path, path: Path) -> Again:
    """Forget again, in the copy ``incoming``, what the file at ``path`` forgot after the
    backup was made; with the same tombstone key (a backup of this profile), the copy also
    gets the file's tombstones, so an import cannot bring them back later either."""
    try:  # none: no file there yet, or a new empty one, which forgot nothing
        forgets = _forgets(path) if identity(path) and os.path.getsize(path) else None
    except (sqlean.Error, OSError, NaviError) as exc:
        why = f"{path} could not be read ({exc}), so what it forgot since is not forgotten again"
        log.warning("restore: %s", why)
        return Again(not_compared=why)
    if forgets is None or not (forgets[1] or forgets[2]):
        return Again()
    again = asyncio.run(_apply(incoming, forgets))
    if again.forgotten or again.redacted:
        log.info(
            "restore of %s: forgotten since, forgotten again: %d memories, %d messages redacted",
            path,
            again.forgotten,
            again.redacted,
        )
    return again


def _forgets(path: Path) -> Forgets:
    conn = read_only(path)
    try:
        key = conn.execute("SELECT value FROM meta WHERE key = 'tombstone_key'").fetchone()[0]
        tombs = conn.execute("SELECT fact_hash, value_hash, kind, created_at FROM tombstones")
        gone = conn.execute("SELECT hash, words, created_at FROM forgotten_phrases")
        return key, [tuple(t) for t in tombs], [tuple(p) for p in gone]
    finally:
        conn.close()


async def _apply(incoming: Path, forgets: Forgets) -> Again:
    """The forgets in the copy (opened, so brought to this schema), as a forget carries itself
    into a backup."""
    from navi_desktop.memory.forget_copies import open_copy
    from navi_desktop.memory.matching import Matcher

    async with open_copy(incoming) as copy:
        async with copy.db.transaction():
            again, tombs, new = await _compare(copy, forgets)
            gone: list[int] = []
            for scope, ids in (("everywhere", again.everywhere), ("evidence", again.evidence)):
                marks = ",".join("?" * len(ids))
                rows = await copy.db.fetchall(f"SELECT * FROM memories WHERE id IN ({marks})", ids)
                if rows:
                    went, counts = await copy._forget_rows(rows, *copy._needles_for(rows, scope))
                    gone, again.redacted = gone + went, again.redacted + counts.messages
            if again.phrases:
                matcher = Matcher.of_phrases(again.phrases)
                same = {matcher.form(p) for p in again.phrases}
                went, counts = await copy._forget_rows([], matcher, same)
                gone, again.redacted = gone + went, again.redacted + counts.messages
            await copy.db.executemany(
                "INSERT OR IGNORE INTO tombstones (fact_hash, value_hash, kind, created_at)"
                " VALUES (?, ?, ?, ?)",
                tombs,
            )
            await copy.db.executemany(
                "INSERT OR IGNORE INTO forgotten_phrases (hash, words, created_at)"
                " VALUES (?, ?, ?)",
                new,
            )
        again.forgotten = len(set(gone))
        if (again.everywhere or again.evidence or again.phrases) and (
            why := await copy._purge_free_space(gone)
        ):
            raise NaviError(f"the copy's old pages still hold what was forgotten: {why}")
    return again


async def _compare(copy: MemoryStore, forgets: Forgets) -> tuple[Again, list[Any], list[Any]]:
    """What of ``forgets`` the copy still holds, and the tombstones and phrases to carry into
    it (none when its key differs: another profile's hashes would match nothing there)."""
    key, tombs, gone_phrases = forgets
    again = Again()
    if key == await copy.db.scalar("SELECT value FROM meta WHERE key = 'tombstone_key'"):
        known = {r[0] for r in await copy.db.fetchall("SELECT fact_hash FROM tombstones")}
        said = {r[0] for r in await copy.db.fetchall("SELECT hash FROM forgotten_phrases")}
        tombs = [t for t in tombs if t[0] not in known]  # only what it forgot since
        new = [p for p in gone_phrases if p[0] not in said]
        carry = tombs, new
    else:
        new, carry = gone_phrases, ([], [])
    secret = bytes.fromhex(key)

    def hashed(phrase: str) -> str:
        return keyed_hash(secret, f"phrase\x1f{phrase}")

    facts, values = {t[0] for t in tombs}, {t[1] for t in tombs}
    every = {p[0] for p in gone_phrases}
    wanted = {p[0]: p[1] for p in new}  # hash: words
    rows = "SELECT id, kind, norm_key, value, evidence FROM memories"
    for row in await copy.db.fetchall(rows) if facts else ():
        kind, value = row["kind"], row["value"]
        value_hash = keyed_hash(secret, f"{kind}\x1f{value}")
        fact_hash = value_hash
        if row["norm_key"]:
            fact_hash = keyed_hash(secret, f"{kind}\x1f{row['norm_key']}\x1f{value}")
        if fact_hash in facts or value_hash in values:
            whole = any(hashed(form) in every for form in phrase_forms(value))
            (again.everywhere if whole else again.evidence).append(row["id"])
            # Its own forget below matches these: no need to look for them in every text.
            for said in (value if whole else None, row["evidence"]):
                for form in phrase_forms(said) if said else ():  # each form it was buried in
                    wanted.pop(hashed(form), None)
    # Words forgotten everywhere may be in the copy without their memory (learned after it):
    # every text is read for them, a keyed hash per run of words (~2 s for 10,000 messages).
    if lengths := set(wanted.values()):
        async for text in _texts(copy):
            for phrase in phrases(text, lengths):
                if hashed(phrase) in wanted:
                    again.phrases.add(phrase)
    return again, *carry


def _other_texts() -> list[tuple[str, list[bool]]]:
    """Besides messages (read page by page): a query per table the forget's scrub reaches
    (scrub_plan.TEXT_COLUMNS), so that a phrase only the profile summary or an entity's name
    still holds is found too; with whether each column's values are JSON (see json_texts)."""
    tables: dict[str, list[tuple[str, bool]]] = {}
    for table, column, stored_json in TEXT_COLUMNS:
        if table != "messages":
            tables.setdefault(table, []).append((column, stored_json))
    queries = []
    for table, columns in tables.items():
        query = f"SELECT {', '.join(c for c, _ in columns)} FROM {table}"
        if table == "meta":  # a secret and pending work, not what the user said
            query += f" WHERE key NOT IN ('tombstone_key', '{PENDING_KEY}')"
        queries.append((query, [j for _, j in columns]))
    return queries


async def _texts(copy: MemoryStore) -> AsyncIterator[str]:
    """Every text a forgotten phrase may be in: what the forget's scrub redacts."""
    for query, stored_json in _other_texts():
        for row in await copy.db.fetchall(query):
            for text, is_json in zip(row, stored_json, strict=True):
                if text:
                    for said in json_texts(text) if is_json else (text,):
                        yield said
    last = 0
    while rows := await copy.db.fetchall(
        "SELECT id, content, meta FROM messages WHERE id > ? ORDER BY id LIMIT ?", (last, PAGE)
    ):
        last = rows[-1]["id"]
        for row in rows:
            if row["content"]:
                yield row["content"]
            if row["meta"]:
                for said in json_texts(row["meta"]):
                    yield said
