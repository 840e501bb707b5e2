"""Export and import on the server: the same file as the SQLite side's (export_format.py
holds the format and its checks), so a file from one backend imports into the other."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.export_format import (
    IMPORT_COLUMNS,
    ImportReport,
    export_document,
    export_markdown_text,
    import_history,
    import_norm_key,
    import_texts,
    import_values,
    remap_history,
    validate_export,
)
from navi_desktop.memory.facts import MEMORY_COLUMNS
from navi_desktop.memory.textproc import normalize

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore

_INSERT = (
    f"INSERT INTO memories ({', '.join(IMPORT_COLUMNS)}) VALUES"
    f" ({', '.join(f'${i}' for i in range(1, len(IMPORT_COLUMNS) + 1))}) RETURNING id"
)


class PgExchangeOps:
    async def export_data(self: PgMemoryStore, *, include_inactive: bool = True) -> dict[str, Any]:
        async with self.db.reading():
            where = "" if include_inactive else "WHERE status = 'active'"
            rows = await self.db.fetchall(
                f"SELECT {MEMORY_COLUMNS} FROM memories {where} ORDER BY id"
            )
            history = await self.db.fetchall(
                "SELECT id, memory_id, action, actor, at, old, new FROM memory_history ORDER BY id"
            )
            sessions = await self.db.fetchall(
                "SELECT id, title, created_at FROM sessions WHERE id IN"
                " (SELECT session_id FROM memories) ORDER BY created_at"
            )
        return export_document(rows, history, sessions)

    async def export_markdown(self: PgMemoryStore) -> str:
        return export_markdown_text(await self.export_data(include_inactive=False))

    async def import_data(self: PgMemoryStore, data: dict[str, Any]) -> ImportReport:
        """Import an export; what is already present is skipped, so importing twice is safe.
        One transaction: a bad item leaves the profile unchanged."""
        data = validate_export(data)
        report = ImportReport()
        async with self.db.transaction():
            for s in data.get("sessions", []):
                title = s.get("title")
                if title and await self._forgotten_phrase([title]):
                    title = None
                await self.db.execute(
                    "INSERT INTO sessions (id, title, created_at, last_active_at, state, ended_at)"
                    " VALUES ($1, $2, $3, $3, 'ended', $3) ON CONFLICT DO NOTHING",
                    (s["id"], title, s["created_at"]),
                )
            items = sorted(data["memories"], key=lambda m: m["id"])
            for item in items:
                await self._import_one(item, report)
            for item in items:  # links between versions, once every id is known
                new_id = report.ids.get(item["id"])
                target = report.ids.get(item.get("superseded_by"))
                if new_id in report.new_ids and target:
                    await self.db.execute(
                        "UPDATE memories SET superseded_by = $1 WHERE id = $2", (target, new_id)
                    )
            if report.new_ids:
                rows = await self.db.fetchall(
                    "SELECT id, new FROM memory_history WHERE action IN"
                    " ('superseded', 'supersedes') AND memory_id = ANY($1::bigint[])",
                    (report.new_ids,),
                )
                await self.db.executemany(
                    "UPDATE memory_history SET new = $1 WHERE id = $2",
                    [(remap_history(r["new"], report.ids), r["id"]) for r in rows],
                )
        return report

    async def _import_one(self: PgMemoryStore, item: dict[str, Any], report: ImportReport) -> None:
        value = item["value"].strip()
        norm_key = import_norm_key(item)
        # Forgotten before, or carrying a phrase forgotten everywhere: never brought back.
        if await self._tombstoned(item["kind"], norm_key, value) or await self._forgotten_phrase(
            import_texts(item)
        ):
            report.blocked += 1
            return
        now = now_iso()
        same = await self.db.fetchall(
            "SELECT id, value FROM memories WHERE kind = $1 AND created_at = $2"
            " AND norm_key IS NOT DISTINCT FROM $3",
            (item["kind"], item.get("created_at") or now, norm_key),
        )
        for row in same:
            if normalize(row["value"]) == normalize(value):
                report.skipped += 1
                report.ids[item["id"]] = row["id"]
                return
        session = item.get("session_id")
        if session and not await self.db.scalar("SELECT 1 FROM sessions WHERE id = $1", (session,)):
            session = None
        new_id = await self.db.scalar(_INSERT, import_values(item, session, now))
        await self.db.executemany(
            "INSERT INTO memory_history (memory_id, action, actor, old, new, at)"
            " VALUES ($1, $2, $3, $4, $5, $6)",
            [
                (new_id, action, actor, _json(old), _json(new), at)
                for action, actor, old, new, at in import_history(item, now)
            ],
        )
        await self._index_memory(await self._row(new_id))
        await self._mark_profile_stale()
        report.added += 1
        report.ids[item["id"]] = new_id
        report.new_ids.append(new_id)


def _json(value: dict[str, Any] | None) -> str | None:
    return json.dumps(value, ensure_ascii=False) if value else None
