"""Copy one profile's whole memory into an empty profile on another backend (``navi memory
migrate``): a SQLite file to a memory server, back, or file to file.

Rows may get new ids on the target; every reference follows them (a message's or memory's
id in another table, version chains, the history rows that name other versions, the
reflection watermark). What each backend derives is rebuilt there: the words index (SQLite's
FTS rows, the server's tsv), and vectors in the target's form (float vectors on the server,
int8 copies with sign bits in a file; cosine does not depend on their scale). The tombstone
key travels with the tombstones, so what was forgotten stays forgotten. The whole copy is one
transaction on the target: it is all there, or the target is as it was."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from navi_desktop.errors import InvalidInput, NaviError
from navi_desktop.memory.copy_sides import Side, side_of
from navi_desktop.memory.documents import memory_document, message_documents
from navi_desktop.memory.export_format import remap_history

# Every table of a profile, in the order they are copied (a row after those it refers to).
TABLES = (
    "meta",
    "sessions",
    "messages",
    "memories",
    "memory_history",
    "tombstones",
    "forgotten_phrases",
    "entities",
    "entity_aliases",
    "entity_links",
    "entities_enriched",
    "injections",
    "reply_feedback",
    "embeddings",
)
FRESH_META = {"created_at", "tombstone_key"}  # what a new, empty profile is made with
SOURCE_ONLY_META = {"pending_scrubs"}  # the source file's own unfinished scrubs (by its ids)
WATERMARKS = {"last_reflection_fact_id"}  # meta values that are memory ids
ONLY_ON_ONE_SIDE = {"bits"}  # SQLite's sign bits: rebuilt from the vector, not copied
RENUMBERED = {"memory_history", "injections"}  # ids the target gives: nothing names them

Ids = dict[int, int]


@dataclass
class CopyReport:
    source: str
    target: str
    counts: dict[str, int] = field(default_factory=dict)  # rows written, per table
    left_out: dict[str, int] = field(default_factory=dict)  # rows not copied, and why
    nuls_replaced: int = 0  # NUL characters stored as U+FFFD (the memory server's, pg/db.py)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "counts": self.counts,
            "left_out": self.left_out,
            "nuls_replaced": self.nuls_replaced,
        }

    def add(self, table: str, n: int) -> None:
        self.counts[table] = self.counts.get(table, 0) + n

    def leave_out(self, why: str, n: int = 1) -> None:
        if n:
            self.left_out[why] = self.left_out.get(why, 0) + n


async def copy_profile(source: Any, target: Any) -> CopyReport:
    """Copy everything of ``source``'s profile into ``target``'s, which must be empty (a
    ``MemoryStore`` or a ``PgMemoryStore`` each). Raises ``InvalidInput`` naming the target
    when it is not empty; on any failure the target keeps nothing of the copy."""
    src, dst = side_of(source), side_of(target)
    if src.where == dst.where:
        raise InvalidInput(f"{src.where} is both the source and the target of the copy")
    report = CopyReport(src.where, dst.where)
    async with src.snapshot(), dst.writing():
        await _check_tables(src, dst)
        await _check_empty(dst)
        await _copy(src, dst, report)
    report.nuls_replaced = dst.nuls_replaced
    dst.forget_caches()
    return report


async def _check_tables(src: Side, dst: Side) -> None:
    """Refuse what could not be copied whole: a table or a column the target lacks (one of
    the two was made by another version of Navi)."""
    unknown = sorted(await src.tables() - set(TABLES))
    if unknown:
        raise NaviError(
            f"{src.where} has tables this version of Navi does not copy ({', '.join(unknown)}):"
            " update Navi, then migrate again"
        )
    for table in TABLES:
        have, want = await dst.columns(table), await src.columns(table)
        missing = sorted(set(want) - set(have) - ONLY_ON_ONE_SIDE)
        if missing:
            raise NaviError(
                f"{dst.where} has no column {', '.join(f'{table}.{c}' for c in missing)}"
                f" that {src.where} uses: update Navi (and the server's schema) first"
            )


async def _check_empty(dst: Side) -> None:
    held = []
    for table in TABLES[1:]:
        n = int(await dst.scalar(f"SELECT count(*) FROM {table}") or 0)
        if n:
            held.append(f"{n} {table.replace('_', ' ')}")
    marks = ", ".join("?" * len(FRESH_META))
    meta = await dst.scalar(f"SELECT count(*) FROM meta WHERE key NOT IN ({marks})", *FRESH_META)
    if meta:
        held.append(f"{meta} settings (profile summary, ...)")
    if held:
        raise InvalidInput(
            f"{dst.where} is not empty ({', '.join(held)}): the copy goes into an empty profile"
            " only; choose another profile or empty that one first (it was left unchanged)"
        )


async def _copy(src: Side, dst: Side, report: CopyReport) -> None:
    meta = [r async for rows in src.chunks("meta", ("key",)) for r in rows]
    scrubs = sum(r["key"] in SOURCE_ONLY_META for r in meta)
    await _copy_meta(dst, [r for r in meta if r["key"] not in SOURCE_ONLY_META | WATERMARKS])
    report.leave_out("unfinished scrubs of the source file", scrubs)
    async for rows in src.chunks("sessions", ("id",)):
        await dst.insert_plain("sessions", rows)
        report.add("sessions", len(rows))
    messages = await _copy_messages(src, dst, report)
    memories = await _copy_memories(src, dst, messages, report)
    used = await src.memory_ids_used()
    if used and src.kind == dst.kind == "sqlite":  # the ids were kept: so is their sequence
        await dst.keep_memory_ids_used(used)
    watermarks = [r for r in meta if r["key"] in WATERMARKS]
    await _copy_meta(dst, [{**r, "value": _watermark(r["value"], memories)} for r in watermarks])
    report.add("meta", len(meta) - scrubs)

    async for rows in src.chunks("memory_history", ("id",)):
        kept = _follow(rows, report, "memory_history", required={"memory_id": memories})
        for r in kept:
            if r["action"] in ("superseded", "supersedes"):
                r["new"] = remap_history(r["new"], memories)
        await _plain(dst, "memory_history", kept, report)
    for table, key in (("tombstones", "fact_hash"), ("forgotten_phrases", "hash")):
        async for rows in src.chunks(table, (key,)):
            await _plain(dst, table, rows, report)

    entities: Ids = {}
    async for rows in src.chunks("entities", ("id",)):
        entities.update(_pairs(rows, await dst.insert("entities", rows)))
        report.add("entities", len(rows))
    async for rows in src.chunks("entity_aliases", ("norm",)):
        kept = _follow(rows, report, "entity_aliases", required={"entity_id": entities})
        await _plain(dst, "entity_aliases", kept, report)
    owners = {"memory_id": memories, "message_id": messages}
    for column in owners:
        key = (column, "entity_id")
        async for rows in src.chunks("entity_links", key, f"{column} IS NOT NULL"):
            kept = _follow(rows, report, "entity_links", required={**owners, "entity_id": entities})
            await _plain(dst, "entity_links", kept, report)
    async for rows in src.chunks("entities_enriched", ("memory_id",)):
        kept = _follow(rows, report, "entities_enriched", required={"memory_id": memories})
        await _plain(dst, "entities_enriched", kept, report)

    async for rows in src.chunks("injections", ("id",)):
        kept = _follow(rows, report, "injections", required=owners)
        await _plain(dst, "injections", kept, report)
    async for rows in src.chunks("reply_feedback", ("message_id",)):
        kept = _follow(
            rows,
            report,
            "reply_feedback",
            required={"message_id": messages},
            optional={"turn_id": messages},
        )
        await _plain(dst, "reply_feedback", kept, report)
    async for rows in src.chunks("embeddings", ("id",)):
        kept = _follow(rows, report, "embeddings", required=owners)
        damaged = await dst.insert_embeddings(kept, src)
        report.add("embeddings", len(kept) - damaged)
        report.leave_out("damaged vectors (re-embedded later)", damaged)


async def _copy_meta(dst: Side, rows: list[dict[str, Any]]) -> None:
    """The source's settings replace the fresh profile's (its tombstone key above all)."""
    await dst.executemany("DELETE FROM meta WHERE key = ?", [(r["key"],) for r in rows])
    await dst.insert_plain("meta", rows)


async def _copy_messages(src: Side, dst: Side, report: CopyReport) -> Ids:
    ids: Ids = {}
    previous: dict[str, dict[str, Any]] = {}  # each session's last message: its index context
    async for rows in src.chunks("messages", ("id",)):
        docs = []
        for r in rows:
            docs.append(message_documents(r, previous.get(r["session_id"])))
            previous[r["session_id"]] = r
        ids.update(_pairs(rows, await dst.insert("messages", rows, docs=docs)))
        report.add("messages", len(rows))
    return ids


async def _copy_memories(src: Side, dst: Side, messages: Ids, report: CopyReport) -> Ids:
    ids: Ids = {}
    chains: list[tuple[int, int]] = []  # (old id, old id of the version that replaced it)
    async for rows in src.chunks("memories", ("id",)):
        for r in rows:
            if r["superseded_by"] is not None:
                chains.append((r["id"], r["superseded_by"]))
            r["superseded_by"] = None  # set once every version is there
        rows = _follow(
            rows, report, "memories", optional={"message_from": messages, "message_to": messages}
        )
        docs = [memory_document(r) for r in rows]
        ids.update(_pairs(rows, await dst.insert("memories", rows, docs=docs)))
        report.add("memories", len(rows))
    await dst.executemany(
        "UPDATE memories SET superseded_by = ? WHERE id = ?",
        [(ids[newer], ids[old]) for old, newer in chains if newer in ids],
    )
    return ids


def _pairs(rows: list[dict[str, Any]], new_ids: list[int]) -> Ids:
    return dict(zip([r["id"] for r in rows], new_ids, strict=True))


def _watermark(value: str, memories: Ids) -> str:
    """A "seen up to memory N" mark: the new id of the newest memory at or before N."""
    try:
        mark = int(value)
    except ValueError:
        return value
    old = sorted(memories)
    at = bisect.bisect_right(old, mark)
    return str(memories[old[at - 1]]) if at else "0"


def _follow(
    rows: Iterable[dict[str, Any]],
    report: CopyReport,
    table: str,
    *,
    required: dict[str, Ids] | None = None,
    optional: dict[str, Ids] | None = None,
) -> list[dict[str, Any]]:
    """The rows with their references to other rows changed to the target's ids. A row whose
    required reference names a row that was not copied is left out; an optional one that
    does is cleared (the source's own foreign keys make either rare)."""
    kept = []
    for r in rows:
        whole = True
        for column, ids in (required or {}).items():
            if r[column] is not None:
                new = ids.get(r[column])
                whole = whole and new is not None
                r[column] = new
        if not whole:
            report.leave_out(f"{table} naming a row that is gone")
            continue
        for column, ids in (optional or {}).items():
            if r[column] is not None:
                r[column] = ids.get(r[column])
        kept.append(r)
    return kept


async def _plain(dst: Side, table: str, rows: list[dict[str, Any]], report: CopyReport) -> None:
    if table in RENUMBERED:
        rows = [{k: v for k, v in r.items() if k != "id"} for r in rows]
    await dst.insert_plain(table, rows)
    report.add(table, len(rows))


__all__ = ["TABLES", "CopyReport", "copy_profile"]
