"""Export (JSON that round-trips, Markdown for reading) and idempotent import."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import InvalidInput
from navi_desktop.memory.clock import check_iso, now_iso
from navi_desktop.memory.documents import memory_text
from navi_desktop.memory.facts import NewMemory
from navi_desktop.memory.models import CATEGORIES, KINDS, STATUSES, HistoryEntry
from navi_desktop.memory.textproc import normalize, normalize_key

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore

FORMAT = "navi-memory"
VERSION = 1
_FIELDS = (
    "id",
    "kind",
    "category",
    "subject",
    "key",
    "value",
    "evidence",
    "source",
    "confidence",
    "session_id",
    "status",
    "pinned",
    "strength",
    "mentions",
    "created_at",
    "updated_at",
    "last_used_at",
    "valid_from",
    "valid_to",
    "superseded_by",
    "review_reason",
    "expires_at",
    "last_verified_at",
)


@dataclass
class ImportReport:
    added: int = 0
    skipped: int = 0  # already present
    blocked: int = 0  # forgotten before (tombstoned)
    ids: dict[int, int] = field(default_factory=dict)  # file id -> id in this profile
    new_ids: list[int] = field(default_factory=list)  # rows this import created


class _BadNumber(ValueError):
    pass


def _parse_int(text: str) -> int:
    # Python refuses to convert more than 4,300 digits (a ValueError without a position);
    # no value in an export needs more than SQLite's 64 bits.
    if len(text.lstrip("-")) > 19:
        raise _BadNumber(f"a number of {len(text.lstrip('-'))} digits (at most 19 here)")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadNumber(f"the number {text[:40]} is too large")
    return value


def _no_constant(name: str) -> Any:
    raise _BadNumber(f"{name} is not a number JSON allows")


def parse_export(text: str, source: str = "input") -> dict[str, Any]:
    """Parse and validate an export file; every error names where it is."""
    try:
        data = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_no_constant
        )
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise InvalidInput(
            f"{source}: JSON nested too deeply to read (an export nests a few levels)"
        ) from None
    except _BadNumber as exc:
        raise InvalidInput(f"{source}: not a Navi memory export: {exc}") from None
    return validate_export(data, source)


# Optional fields of a memory and what each must be when present (None is always allowed).
_OPTIONAL: dict[str, tuple[type, ...]] = {
    "category": (str,),
    "subject": (str,),
    "key": (str,),
    "evidence": (str,),
    "source": (str,),
    "confidence": (int, float),
    "session_id": (str,),
    "status": (str,),
    "pinned": (bool,),
    "strength": (int, float),
    "mentions": (int,),
    "superseded_by": (int,),
    "review_reason": (str,),
    "expires_at": (str,),
    "last_verified_at": (str,),
    "history": (list,),
}
_WORDS = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    dict: "an object",
    list: "a list",
}
_INT64 = 2**63


def _check_type(where: str, name: str, value: Any, kinds: tuple[type, ...]) -> None:
    if value is None:
        return
    ok = isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))
    if ok and isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _INT64:
        ok = False
    if not ok:
        words = " or ".join(_WORDS.get(k, k.__name__) for k in kinds)
        raise InvalidInput(f'{where}: "{name}" must be {words}')


def _check_history(where: str, history: list[Any]) -> None:
    for n, entry in enumerate(history, start=1):
        here = f"{where}: history entry #{n}"
        if not isinstance(entry, dict):
            raise InvalidInput(f"{here} is not an object")
        for name in ("action", "actor", "at"):
            _check_type(here, name, entry.get(name), (str,))
        for name in ("old", "new"):
            _check_type(here, name, entry.get(name), (dict,))
        if entry.get("at") is not None:
            check_iso(entry["at"], f"{here}: at")


def _check_sessions(source: str, sessions: Any) -> None:
    if not isinstance(sessions, list):
        raise InvalidInput(f'{source}: "sessions" must be a list')
    for n, s in enumerate(sessions, start=1):
        where = f"{source}: session #{n}"
        if not isinstance(s, dict):
            raise InvalidInput(f"{where} is not an object")
        for name in ("id", "created_at"):
            if not isinstance(s.get(name), str) or not s[name]:
                raise InvalidInput(f'{where}: "{name}" must be a non-empty string')
        _check_type(where, "title", s.get("title"), (str,))
        check_iso(s["created_at"], f"{where}: created_at")


def validate_export(data: Any, source: str = "input") -> dict[str, Any]:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InvalidInput(f'{source}: not a Navi memory export (expected "format": "{FORMAT}")')
    if data.get("version") != VERSION:
        raise InvalidInput(f"{source}: unsupported export version {data.get('version')!r}")
    memories = data.get("memories")
    if not isinstance(memories, list):
        raise InvalidInput(f'{source}: "memories" must be a list')
    _check_sessions(source, data.get("sessions", []))
    for n, item in enumerate(memories, start=1):
        where = f"{source}: memory #{n}"
        if not isinstance(item, dict):
            raise InvalidInput(f"{where} is not an object")
        for name, kind in (("id", int), ("value", str), ("kind", str)):
            _check_type(where, name, item.get(name), (kind,))
            if item.get(name) is None:
                raise InvalidInput(f'{where}: "{name}" must be {_WORDS[kind]}')
        for name, kinds in _OPTIONAL.items():
            _check_type(where, name, item.get(name), kinds)
        _check_history(where, item.get("history") or [])
        if item["kind"] not in KINDS:
            raise InvalidInput(f"{where}: unknown kind {item['kind']!r}")
        if item.get("category") not in (None, *CATEGORIES):
            raise InvalidInput(f"{where}: unknown category {item['category']!r}")
        if item.get("status", "active") not in STATUSES:
            raise InvalidInput(f"{where}: unknown status {item['status']!r}")
        stamps = ("created_at", "updated_at", "valid_from", "valid_to", "last_used_at")
        for stamp in (*stamps, "expires_at", "last_verified_at"):
            if item.get(stamp) is not None:
                check_iso(item[stamp], f"{where}: {stamp}")
        NewMemory(
            value=item["value"],
            kind=item["kind"],
            category=item.get("category"),
            source=item.get("source", "import"),
            confidence=item.get("confidence", 1.0),
            expires_at=item.get("expires_at"),  # a past one too: it was true until then
        ).check()
    return data


def _stamp(value: str | None) -> str | None:
    """A time from a file in the stored form (text order is time order)."""
    return check_iso(value, "time") if value else None


class ExchangeOps:
    async def export_data(self: MemoryStore, *, include_inactive: bool = True) -> dict[str, Any]:
        async with self.db.reading():
            where = "" if include_inactive else "WHERE status = 'active'"
            rows = await self.db.fetchall(f"SELECT * FROM memories {where} ORDER BY id")
            history = await self.db.fetchall("SELECT * FROM memory_history ORDER BY id")
            sessions = await self.db.fetchall(
                "SELECT id, title, created_at FROM sessions WHERE id IN"
                " (SELECT session_id FROM memories) ORDER BY created_at"
            )
        by_memory: dict[int, list[dict[str, Any]]] = {}
        for h in map(HistoryEntry.from_row, history):
            by_memory.setdefault(h.memory_id, []).append(
                {"action": h.action, "actor": h.actor, "at": h.at, "old": h.old, "new": h.new}
            )
        return {
            "format": FORMAT,
            "version": VERSION,
            "exported_at": now_iso(),
            "sessions": [dict(s) for s in sessions],
            "memories": [
                {
                    **{k: r[k] for k in _FIELDS},
                    "pinned": bool(r["pinned"]),
                    "history": by_memory.get(r["id"], []),
                }
                for r in rows
            ],
        }

    async def export_markdown(self: MemoryStore) -> str:
        data = await self.export_data(include_inactive=False)
        lines = ["# Navi memory", "", f"Exported {data['exported_at']}.", ""]
        titles = {
            "fact": "Facts",
            "rule": "Rules",
            "episode": "Episodes",
            "reflection": "Reflections",
        }
        for kind, title in titles.items():
            items = [m for m in data["memories"] if m["kind"] == kind]
            if not items:
                continue
            lines += [f"## {title}", ""]
            groups: dict[str, list[dict[str, Any]]] = {}
            for m in items:
                groups.setdefault(m["category"] or "other", []).append(m)
            for category in sorted(groups):
                if kind == "fact":
                    lines += [f"### {category.capitalize()}", ""]
                for m in groups[category]:
                    pin = " (pinned)" if m["pinned"] else ""
                    if m.get("expires_at"):
                        pin += f" (expires {m['expires_at'][:16].replace('T', ' ')} UTC)"
                    lines.append(
                        f"- {memory_text(m)}{pin} — #{m['id']}, since "
                        f"{m['valid_from'][:10]}, confidence {m['confidence']:.2f}"
                    )
                    if m["evidence"]:
                        lines.append(f"  > {m['evidence']}")
                lines.append("")
        return "\n".join(lines)

    async def import_data(self: MemoryStore, data: dict[str, Any]) -> ImportReport:
        """Import an export; memories already present are skipped, so importing twice is safe.
        One transaction: a bad item leaves the profile unchanged."""
        data = validate_export(data)
        report = ImportReport()
        async with self.db.transaction():
            for s in data.get("sessions", []):
                title = s.get("title")
                if title and await self._forgotten_phrase([title]):
                    title = None
                await self.db.execute(
                    "INSERT OR IGNORE INTO sessions (id, title, created_at, last_active_at, state,"
                    " ended_at) VALUES (?, ?, ?, ?, 'ended', ?)",
                    (s["id"], title, s["created_at"], s["created_at"], s["created_at"]),
                )
            items = sorted(data["memories"], key=lambda m: m["id"])
            for item in items:
                await self._import_one(item, report)
            for item in items:  # links between versions, once every id is known
                new_id = report.ids.get(item["id"])
                target = report.ids.get(item.get("superseded_by"))
                if new_id in report.new_ids and target:
                    await self.db.execute(
                        "UPDATE memories SET superseded_by = ? WHERE id = ?", (target, new_id)
                    )
            await self._remap_history_ids(report)
        return report

    async def _remap_history_ids(self: MemoryStore, report: ImportReport) -> None:
        """History rows name other versions by id: translate the file's ids to this profile's."""
        added = report.new_ids
        if not added:
            return
        rows = await self.db.fetchall(
            "SELECT id, new FROM memory_history WHERE action IN ('superseded', 'supersedes')"
            f" AND memory_id IN ({','.join('?' * len(added))})",
            added,
        )
        for row in rows:
            new = json.loads(row["new"] or "{}")
            for name in ("supersedes", "superseded_by"):
                if new.get(name) in report.ids:
                    new[name] = report.ids[new[name]]
            await self.db.execute(
                "UPDATE memory_history SET new = ? WHERE id = ?", (json.dumps(new), row["id"])
            )

    async def _import_one(self: MemoryStore, item: dict[str, Any], report: ImportReport) -> None:
        value = item["value"].strip()
        norm_key = normalize_key(item.get("subject"), item["key"]) if item.get("key") else None
        # Forgotten before, or carrying a phrase forgotten everywhere (in its text, evidence or
        # history): an import never brings it back.
        if await self._tombstoned(item["kind"], norm_key, value) or await self._forgotten_phrase(
            [
                value,
                item.get("evidence"),
                item.get("subject"),
                item.get("key"),
                json.dumps(item.get("history") or [], ensure_ascii=False),
            ]
        ):
            report.blocked += 1
            return
        created = item.get("created_at") or now_iso()
        same = await self.db.fetchall(
            "SELECT id, value FROM memories WHERE kind = ? AND created_at = ? AND norm_key IS ?",
            (item["kind"], created, norm_key),
        )
        for row in same:
            if normalize(row["value"]) == normalize(value):
                report.skipped += 1
                report.ids[item["id"]] = row["id"]
                return
        session = item.get("session_id")
        if session and not await self.db.scalar("SELECT 1 FROM sessions WHERE id = ?", (session,)):
            session = None
        now = now_iso()
        new_id = await self.db.execute(
            "INSERT INTO memories (kind, category, subject, key, norm_key, value, evidence, source,"
            " confidence, session_id, status, pinned, strength, mentions, created_at, updated_at,"
            " last_used_at, valid_from, valid_to, review_reason, expires_at, last_verified_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                item["kind"],
                item.get("category"),
                item.get("subject"),
                item.get("key"),
                norm_key,
                value,
                item.get("evidence"),
                item.get("source", "import"),
                float(item.get("confidence", 1.0)),
                session,
                item.get("status", "active"),
                int(bool(item.get("pinned"))),
                float(item.get("strength", 1.0)),
                int(item.get("mentions", 1)),
                created,
                item.get("updated_at") or now,
                item.get("last_used_at"),
                item.get("valid_from") or created,
                item.get("valid_to"),
                item.get("review_reason"),
                _stamp(item.get("expires_at")),
                _stamp(item.get("last_verified_at")),
            ),
        )
        for h in item.get("history") or []:
            await self._history(
                new_id,
                h.get("action", "create"),
                h.get("actor", "import"),
                h.get("old"),
                h.get("new"),
                at=h.get("at") or now,
            )
        await self._history(new_id, "import", "import", new={"from_id": item["id"]})
        await self._index_memory(await self._row(new_id))
        await self._mark_profile_stale()
        report.added += 1
        report.ids[item["id"]] = new_id
        report.new_ids.append(new_id)
