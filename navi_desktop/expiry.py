"""When a fact stops being true: the forms a person gives (``7d``, ``2w``, ``2025-06-30``,
``never``), their bounds, and how an expiry reads on screen.

Standard library only: the CLI and the TUI check what the user typed before asking the
daemon, and the engine checks the same way what reaches it.

A date means "through that day": the fact expires at the next local midnight. A time without
a zone is local time too (a person saying "until 18:00" means their clock). Times are stored
as the engine stores them (see ``memory/clock.py``): UTC, milliseconds, a Z.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

from navi_desktop.errors import InvalidInput

MAX_DAYS = 3650  # ten years: beyond that a fact is not "temporary"
FORMS = "a number of days or weeks (7d, 2w) or a date (2025-06-30)"
NEVER = ("never", "none")
_SPAN = re.compile(r"([+-]?\d+)\s*(d|days?|w|weeks?)")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_MAX_TEXT = 64


def stored(when: datetime) -> str:
    """``when`` in the engine's stored form."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def end_of_day(day: date) -> datetime:
    """The local midnight after ``day``: a fact "until Friday" holds all of Friday."""
    return datetime.combine(day + timedelta(days=1), time()).astimezone()


def parse_time(text: str, what: str) -> datetime:
    """An ISO 8601 date (through that day) or time (without a zone: local); aware."""
    value = text.strip()
    try:
        if _DATE.fullmatch(value):
            return end_of_day(date.fromisoformat(value))
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"{what} must be an ISO date or time (2025-06-30, 2025-06-30T18:00Z), got {text!r}"
        ) from None
    return when if when.tzinfo else when.astimezone()


def in_days(days: object, what: str, now: datetime | None = None) -> str:
    """``days`` from ``now`` (a whole number from 1 to ``MAX_DAYS``), stored form."""
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise InvalidInput(
            f"{what} must be a whole number of days from 1 to {MAX_DAYS} (ten years), got {days!r}"
        )
    return stored((now or datetime.now(UTC)) + timedelta(days=days))


def check_future(when: datetime, what: str, said: str, now: datetime | None = None) -> str:
    """``when`` in stored form, if it is ahead of ``now`` and within ``MAX_DAYS``."""
    now = now or datetime.now(UTC)
    if when <= now:
        raise InvalidInput(
            f"{what} {said} is in the past: give a later date, or a number of days such as 7d"
        )
    if when - now > timedelta(days=MAX_DAYS):
        raise InvalidInput(
            f"{what} {said} is more than {MAX_DAYS} days (ten years) away: give a nearer date,"
            " or leave the fact without an expiry"
        )
    return stored(when)


def check_expires_at(value: str, what: str = "expires_at", now: datetime | None = None) -> str:
    """An expiry given as a date or time (the engine's API): ahead of now, stored form."""
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise InvalidInput(
            f"{what} must be an ISO date or time (2025-06-30, 2025-06-30T18:00Z),"
            f" got {str(value)[:_MAX_TEXT]!r}"
        )
    return check_future(parse_time(value, what), what, value.strip(), now)


def parse_expires(text: str, what: str = "--expires", now: datetime | None = None) -> str | None:
    """What a person typed: ``7d``, ``2w``, a date or time (stored form), or ``never`` (None)."""
    raw = text.strip()
    value = " ".join(raw.split()).lower()
    if value in NEVER:
        return None
    if not value or len(value) > _MAX_TEXT:
        raise InvalidInput(f"{what} must be {FORMS}, or never; got {text[:_MAX_TEXT]!r}")
    if value.lstrip("+-").isdigit():
        raise InvalidInput(f"{what} {text!r} needs a unit: {value.lstrip('+')}d for days")
    span = _SPAN.fullmatch(value)
    if span is None:
        try:
            parse_time(raw, what)
        except InvalidInput:
            raise InvalidInput(f"{what} must be {FORMS}, or never; got {text!r}") from None
        return check_expires_at(raw, what, now)
    digits = span.group(1)
    count = int(digits) if len(digits) <= 8 else MAX_DAYS + 1  # "9" * 5000 is no date
    days = count * (7 if span.group(2).startswith("w") else 1)
    if not 1 <= days <= MAX_DAYS:
        raise InvalidInput(
            f"{what} must be from 1 day to {MAX_DAYS} days (ten years) ahead, got {text!r}"
        )
    return in_days(days, what, now)


def is_expired(expires_at: str | None, now: datetime | None = None) -> bool:
    if not expires_at:
        return False
    return stored(now or datetime.now(UTC)) >= expires_at


def _aware(stamp: str) -> datetime:
    when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def local_time(expires_at: str) -> str:
    """An expiry on the user's clock: "2025-06-30 18:00", or "end of 2025-06-30" for a date
    given (through that day)."""
    try:
        mine = _aware(expires_at).astimezone()
    except ValueError:
        return expires_at
    if (mine.hour, mine.minute) == (0, 0):
        return f"end of {(mine - timedelta(days=1)).date().isoformat()}"
    return mine.strftime("%Y-%m-%d %H:%M")


def describe(expires_at: str, now: datetime | None = None) -> str:
    """An expiry as a person reads it: "in 6 days (2025-06-30 18:00)", "expired 2 h ago (…)"."""
    try:
        when = _aware(expires_at)
    except ValueError:
        return expires_at
    seconds = (when - (now or datetime.now(UTC))).total_seconds()
    span, local = _span(abs(seconds)), local_time(expires_at)
    return f"expired {span} ago ({local})" if seconds <= 0 else f"in {span} ({local})"


def _span(seconds: float) -> str:
    if seconds < 3600:
        return f"{max(1, int(seconds // 60))} min"
    if seconds < 2 * 86400:
        return f"{int(seconds // 3600)} h"
    return f"{round(seconds / 86400)} days"  # 2w less a second is 14 days, not 13
