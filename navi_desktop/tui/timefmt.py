"""Short, relative times for lists ("now", "5m", "3h", "2d", then the date)."""

from __future__ import annotations

from datetime import UTC, datetime

RETIME_S = 30.0  # how often lists showing these times redraw them ("1m" must not stay "1m")


def clock() -> datetime:
    return datetime.now(UTC)


def ago(iso: str | None, now: datetime | None = None) -> str:
    if not iso:
        return ""
    try:
        then = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    seconds = ((now or clock()) - then).total_seconds()
    if seconds < 60:
        return "now"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h"
    if seconds < 7 * 86400:
        return f"{int(seconds // 86400)}d"
    return then.date().isoformat()
