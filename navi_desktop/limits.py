"""Sizes a user can run into, in one place: the daemon checks them, and the CLI and the app
check them before asking, so that a user reads them in words (the daemon's own line names a
parameter, which suits programs)."""

from __future__ import annotations

from navi_desktop.errors import InvalidInput

MAX_QUERY = 10_000  # a search's text
MAX_ENTITY_NAME = 200  # an entity's name, as the user types it; a search among them
SEARCH = "a search"
ENTITY_SEARCH = "a search among entities (by name)"


def too_long(text: str, limit: int, what: str) -> str | None:
    """The line for ``text`` longer than ``limit`` (``what``: "a search"); None when it fits."""
    if len(text) <= limit:
        return None
    return (
        f"{what} is at most {limit:,} characters, and this one has {len(text):,}:"
        " use a few words from it"
    )


def check_length(text: str | None, limit: int, what: str) -> None:
    """Refuse ``text`` longer than ``limit`` in those words (see ``too_long``)."""
    if text is not None and (line := too_long(text, limit, what)) is not None:
        raise InvalidInput(line)
