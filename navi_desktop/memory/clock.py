"""Timestamps as stored: ISO 8601 UTC with milliseconds and a Z, so text order is time order."""

from __future__ import annotations

from datetime import UTC, datetime

from navi_desktop.errors import InvalidInput


def iso(when: datetime) -> str:
    """``when`` in the stored form (an aware time, converted to UTC)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def now_iso() -> str:
    return iso(datetime.now(UTC))


def parse_iso(value: str) -> datetime:
    when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def check_iso(value: str, what: str) -> str:
    """Validate a user-supplied time and return it in the stored form."""
    try:
        when = parse_iso(value)
    except (ValueError, AttributeError, TypeError):
        raise InvalidInput(f"{what} must be an ISO 8601 date or time, got {value!r}") from None
    return iso(when)
