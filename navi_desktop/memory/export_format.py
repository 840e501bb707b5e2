"""The memory export file, the same on every backend: reading and checking a file, building
one from rows, the Markdown view, and the values an import writes. No database here: each
backend fetches rows and writes them (exchange.py, for both)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from navi_desktop.errors import InvalidInput
from navi_desktop.memory.clock import check_iso, now_iso
from navi_desktop.memory.documents import memory_text
from navi_desktop.memory.facts import NewMemory
from navi_desktop.memory.models import CATEGORIES, KINDS, STATUSES, HistoryEntry
from navi_desktop.memory.textproc import normalize_key
from navi_desktop.terminal_text import SURROGATE, SURROGATE_ESCAPE

FORMAT = "navi-memory"
VERSION = 1
FIELDS = (
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
# The columns an import writes, in order (``import_values``).
IMPORT_COLUMNS = (
    "kind",
    "category",
    "subject",
    "key",
    "norm_key",
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
    nuls_replaced: int = 0  # NUL characters stored as U+FFFD (the memory server's, pg/db.py)


def count_nuls(value: Any) -> int:
    """NUL characters in the texts of ``value`` (a row, an item, nested lists and dicts): what
    a memory server stores as U+FFFD (pg/db.py), counted once where the data came in, not in
    the search documents and look-ups the same text then goes into."""
    if isinstance(value, str):
        return value.count("\0")
    if isinstance(value, dict):
        value = list(value.values())
    return sum(map(count_nuls, value)) if isinstance(value, list | tuple) else 0


NUL_STAND_IN = "\ufffd"


def without_nuls(value: Any) -> Any:
    """``value`` with each NUL in its texts as U+FFFD, as a memory server stores it."""
    if isinstance(value, str):
        return value.replace("\0", NUL_STAND_IN)
    if isinstance(value, dict):
        return {k: without_nuls(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_nuls(v) for v in value]
    return value


class _BadNumber(ValueError):
    pass


def _parse_int(text: str) -> int:
    # Python refuses to convert more than 4,300 digits (a ValueError without a position);
    # no value in an export needs more than 64 bits.
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
    if SURROGATE_ESCAPE.search(text) and (where := _lone_surrogate(data)) is not None:
        raise InvalidInput(
            f"{source}: not valid text at {where}: a \\u escape there is half of a character"
            " (a lone surrogate, which no memory can hold); export the profile again, or fix"
            " that string"
        )
    return validate_export(data, source)


def _lone_surrogate(data: Any) -> str | None:
    """Where in ``data`` a string (or a key) holds a lone surrogate, as ``memories[3].value``;
    None when none does. Only a JSON escape can put one there: the file itself is UTF-8."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            if SURROGATE.search(value):
                return where or "the top"
        elif isinstance(value, dict):
            if any(SURROGATE.search(key) for key in value):
                return f"{where or 'the top'}, in a key"
            items = [(item, f"{where}.{key}" if where else key) for key, item in value.items()]
            stack.extend(reversed(items))  # the first in the file is named
        elif isinstance(value, list):
            stack.extend(reversed([(item, f"{where}[{i}]") for i, item in enumerate(value)]))
    return None


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
        try:
            NewMemory(
                value=item["value"],
                kind=item["kind"],
                category=item.get("category"),
                subject=item.get("subject"),
                key=item.get("key"),
                evidence=item.get("evidence"),
                source=item.get("source", "import"),
                confidence=item.get("confidence", 1.0),
                expires_at=item.get("expires_at"),  # a past one too: it was true until then
            ).check()
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc}") from None
    return data


# -- building a file --------------------------------------------------------------------------


def export_document(memories: list[Any], history: list[Any], sessions: list[Any]) -> dict[str, Any]:
    """The export of these rows (memories by id, history rows by id, sessions by start)."""
    by_memory: dict[int, list[dict[str, Any]]] = {}
    for h in map(HistoryEntry.from_row, history):
        by_memory.setdefault(h.memory_id, []).append(
            {"action": h.action, "actor": h.actor, "at": h.at, "old": h.old, "new": h.new}
        )
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": now_iso(),
        "sessions": [{k: s[k] for k in ("id", "title", "created_at")} for s in sessions],
        "memories": [
            {
                **{k: r[k] for k in FIELDS},
                "pinned": bool(r["pinned"]),
                "history": by_memory.get(r["id"], []),
            }
            for r in memories
        ],
    }


_TITLES = {"fact": "Facts", "rule": "Rules", "episode": "Episodes", "reflection": "Reflections"}


def export_markdown_text(data: dict[str, Any]) -> str:
    """An export (of the active memories) for reading."""
    lines = ["# Navi memory", "", f"Exported {data['exported_at']}.", ""]
    for kind, title in _TITLES.items():
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


# -- reading a file into a profile --------------------------------------------------------------


def _stamp(value: str | None) -> str | None:
    """A time from a file in the stored form (text order is time order)."""
    return check_iso(value, "time") if value else None


def import_norm_key(item: dict[str, Any]) -> str | None:
    return normalize_key(item.get("subject"), item["key"]) if item.get("key") else None


def import_texts(item: dict[str, Any]) -> list[str | None]:
    """Where a forgotten phrase must not come back in (text, evidence, names, history)."""
    return [
        item["value"].strip(),
        item.get("evidence"),
        item.get("subject"),
        item.get("key"),
        json.dumps(item.get("history") or [], ensure_ascii=False),
    ]


def import_values(item: dict[str, Any], session: str | None, now: str) -> tuple[Any, ...]:
    """The row an item becomes, in ``IMPORT_COLUMNS`` order (``session``: its session when
    this profile has it)."""
    created = item.get("created_at") or now
    return (
        item["kind"],
        item.get("category"),
        item.get("subject"),
        item.get("key"),
        import_norm_key(item),
        item["value"].strip(),
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
    )


def import_history(item: dict[str, Any], now: str) -> list[tuple[str, str, Any, Any, str]]:
    """The item's history rows (action, actor, old, new, at), then the import's own."""
    rows = [
        (
            h.get("action", "create"),
            h.get("actor", "import"),
            h.get("old"),
            h.get("new"),
            h.get("at") or now,
        )
        for h in item.get("history") or []
    ]
    return [*rows, ("import", "import", None, {"from_id": item["id"]}, now)]


def remap_history(new: str | None, ids: dict[int, int]) -> str:
    """A supersession history row names other versions by the file's ids: this profile's."""
    record = json.loads(new or "{}")
    for name in ("supersedes", "superseded_by"):
        if record.get(name) in ids:
            record[name] = ids[record[name]]
    return json.dumps(record)
