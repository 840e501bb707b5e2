"""Export (JSON that round-trips, Markdown for reading) and idempotent import, one copy for
both backends: a file from one imports into the other. The format and its checks are in
export_format.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.export_file import read_export_file
from navi_desktop.memory.export_format import (
    FORMAT,
    IMPORT_COLUMNS,
    VERSION,
    ImportReport,
    count_nuls,
    export_document,
    export_markdown_text,
    import_history,
    import_norm_key,
    import_texts,
    import_values,
    parse_export,
    remap_history,
    validate_export,
    without_nuls,
)
from navi_desktop.memory.facts import HISTORY_COLUMNS, MEMORY_COLUMNS
from navi_desktop.memory.textproc import normalize

if TYPE_CHECKING:
    from navi_desktop.memory.backends import Store

# kind, time, key, normalized value -> id. The time is None for an item that has none: it
# is then the same memory as any one here of that kind, key and value, whatever its time.
Key = tuple[str, str | None, str | None, str]
Known = dict[Key, int]
# History rows looked up at a time when ids are remapped (a server takes 32,767 parameters).
REMAP_CHUNK = 1000
KEYS_PAGE = 5000  # memories read at a time when an import looks for what is already here

__all__ = ["FORMAT", "VERSION", "ExchangeOps", "ImportReport", "parse_export", "validate_export"]


class ExchangeOps:
    async def export_data(self: Store, *, include_inactive: bool = True) -> dict[str, Any]:
        async with self.db.reading():
            where = "" if include_inactive else "WHERE status = 'active'"
            rows = await self.db.fetchall(
                f"SELECT {MEMORY_COLUMNS} FROM memories {where} ORDER BY id"
            )
            history = await self.db.fetchall(
                f"SELECT {HISTORY_COLUMNS} FROM memory_history ORDER BY id"
            )
            sessions = await self.db.fetchall(
                "SELECT id, title, created_at FROM sessions WHERE id IN"
                " (SELECT session_id FROM memories) ORDER BY created_at"
            )
        return export_document(rows, history, sessions)

    async def export_markdown(self: Store) -> str:
        return export_markdown_text(await self.export_data(include_inactive=False))

    async def import_file(self: Store, path: Path) -> ImportReport:
        """Import the export at ``path`` (read and checked in a thread, see export_file.py)."""
        return await self.import_data(await asyncio.to_thread(read_export_file, Path(path)))

    async def import_data(self: Store, data: dict[str, Any]) -> ImportReport:
        """Import an export; memories already present are skipped, so importing twice is safe.
        One transaction: a bad item leaves the profile unchanged."""
        data = validate_export(data)
        report = ImportReport()
        nuls: dict[Any, int] = {}
        if getattr(self.db, "replaces_nul", False):
            # Compared as stored: an item held before, or forgotten, is known as it is here.
            nuls = {("s", s["id"]): count_nuls(s) for s in data.get("sessions", [])}
            nuls |= {("m", m["id"]): count_nuls(m) for m in data["memories"]}
            data = without_nuls(data)
        async with self.db.transaction():
            for s in data.get("sessions", []):
                title = s.get("title")
                if title and await self._forgotten_phrase([title]):
                    title = None
                if await self.db.execute(
                    "INSERT INTO sessions (id, title, created_at, last_active_at, state, ended_at)"
                    " VALUES (?1, ?2, ?3, ?3, 'ended', ?3) ON CONFLICT DO NOTHING",
                    (s["id"], title, s["created_at"]),
                ):
                    report.nuls_replaced += nuls.get(("s", s["id"]), 0)
            items = sorted(data["memories"], key=lambda m: m["id"])
            known = await self._import_keys(items)
            for item in items:
                added = report.added
                await self._import_one(item, report, known)
                if report.added > added:
                    report.nuls_replaced += nuls.get(("m", item["id"]), 0)
            for item in items:  # links between versions, once every id is known
                new_id = report.ids.get(item["id"])
                target = report.ids.get(item.get("superseded_by"))
                if new_id in report.new_ids and target:
                    await self.db.execute(
                        "UPDATE memories SET superseded_by = ? WHERE id = ?", (target, new_id)
                    )
            await self._remap_history_ids(report)
        return report

    async def _remap_history_ids(self: Store, report: ImportReport) -> None:
        """History rows name other versions by id: translate the file's ids to this profile's."""
        for start in range(0, len(report.new_ids), REMAP_CHUNK):
            added = report.new_ids[start : start + REMAP_CHUNK]
            rows = await self.db.fetchall(
                "SELECT id, new FROM memory_history WHERE action IN ('superseded', 'supersedes')"
                f" AND memory_id IN ({','.join('?' * len(added))})",
                added,
            )
            await self.db.executemany(
                "UPDATE memory_history SET new = ? WHERE id = ?",
                [(remap_history(row["new"], report.ids), row["id"]) for row in rows],
            )

    async def _import_keys(self: Store, items: list[dict[str, Any]]) -> Known:
        """The memories already here that an imported one could be the same as: of the same
        kind and time (``created_at``) and key, then value; for an item with no time, of the
        same kind, key and value at any time (the oldest). One pass over the memories, a
        page at a time, keeping only those that can match: looked up per item, a query
        scanned every memory of the kind (8 ms each at 30k), and re-importing an export of
        30k took 3.5 minutes; a page at a time, a large profile is never in memory whole."""
        times = {item["created_at"] for item in items if item.get("created_at")}
        undated = {_content(item) for item in items if not item.get("created_at")}
        # (kind, key) first: most rows are ruled out without normalizing their value.
        undated_keys = {(kind, norm_key) for kind, norm_key, _ in undated}
        known: Known = {}
        last = 0
        while times or undated:
            rows = await self.db.fetchall(
                "SELECT id, kind, created_at, norm_key, value FROM memories"
                " WHERE id > ? ORDER BY id LIMIT ?",
                (last, KEYS_PAGE),
            )
            for row in rows:
                kind, norm_key = row["kind"], row["norm_key"]
                if row["created_at"] in times:
                    key = (kind, row["created_at"], norm_key, normalize(row["value"]))
                    known.setdefault(key, row["id"])  # the oldest, as the query's first was
                if (kind, norm_key) in undated_keys:
                    content = (kind, norm_key, normalize(row["value"]))
                    if content in undated:
                        known.setdefault(_undated(content), row["id"])
            if len(rows) < KEYS_PAGE:
                break
            last = rows[-1]["id"]
        return known

    async def _import_one(
        self: Store, item: dict[str, Any], report: ImportReport, known: Known
    ) -> None:
        value = item["value"].strip()
        norm_key = import_norm_key(item)
        # Forgotten before, or carrying a phrase forgotten everywhere (in its text, evidence or
        # history): an import never brings it back.
        if await self._tombstoned(item["kind"], norm_key, value) or await self._forgotten_phrase(
            import_texts(item)
        ):
            report.blocked += 1
            return
        now = now_iso()
        content = _content(item)
        # Not keyed by ``now``: an undated item would then never match (twice imported, twice
        # added), and identical ones in a file would collapse only within a millisecond.
        created = item.get("created_at")
        key = (item["kind"], created, norm_key, content[2]) if created else _undated(content)
        if (known_id := known.get(key)) is not None:
            report.skipped += 1
            report.ids[item["id"]] = known_id
            return
        session = item.get("session_id")
        if session and not await self.db.scalar("SELECT 1 FROM sessions WHERE id = ?", (session,)):
            session = None
        new_id = await self.db.scalar(
            f"INSERT INTO memories ({', '.join(IMPORT_COLUMNS)})"
            f" VALUES ({', '.join('?' * len(IMPORT_COLUMNS))}) RETURNING id",
            import_values(item, session, now),
        )
        for action, actor, old, new, at in import_history(item, now):
            await self._history(new_id, action, actor, old, new, at=at)
        await self._index_memory(await self._row(new_id))
        await self._mark_profile_stale()
        known.setdefault(key, new_id)
        known.setdefault(_undated(content), new_id)  # a later undated twin is this one
        report.added += 1
        report.ids[item["id"]] = new_id
        report.new_ids.append(new_id)


def _content(item: dict[str, Any]) -> tuple[str, str | None, str]:
    """What makes an item the same memory, less its time: kind, key, value as compared."""
    return item["kind"], import_norm_key(item), normalize(item["value"].strip())


def _undated(content: tuple[str, str | None, str]) -> Key:
    kind, norm_key, value = content
    return kind, None, norm_key, value
