"""Sizes a user can run into, in one place: the memory engine and the daemon hold to them,
and the CLI and the app check them before asking, so that a user reads them in words (the
daemon's own line names a parameter, which suits programs)."""

from __future__ import annotations

from navi_desktop.errors import InvalidInput

MAX_VALUE = 20_000  # a memory's text, its evidence
MAX_LABEL = 500  # subject, key, a review reason
MAX_QUERY = 10_000  # a search's text
MAX_ENTITY_NAME = 200  # an entity's name, as the user types it; a search among them
MAX_CHAT_TEXT = 100_000  # a chat message
SEARCH = "a search"
ENTITY_SEARCH = "a search among entities (by name)"
SHORTER = "shorten it"


def too_long(text: str, limit: int, what: str, fix: str = "use a few words from it") -> str | None:
    """The line for ``text`` longer than ``limit`` (``what``: "a search"); None when it fits."""
    if len(text) <= limit:
        return None
    return f"{what} is at most {limit:,} characters, and this one has {len(text):,}: {fix}"


def too_long_sentence(text: str, limit: int, what: str) -> str | None:
    """``too_long``'s line as a sentence to show on its own (a list's only row), or None."""
    line = too_long(text, limit, what)
    return f"{line[0].upper()}{line[1:]}." if line else None


def check_length(
    text: str | None, limit: int, what: str, fix: str = "use a few words from it"
) -> None:
    """Refuse ``text`` longer than ``limit`` in those words (see ``too_long``)."""
    if isinstance(text, str) and (line := too_long(text, limit, what, fix)) is not None:
        raise InvalidInput(line)


def check_memory_fields(**fields: str | None) -> None:
    """A memory's texts by name (value, evidence, subject, key, review_reason), each within
    its size. Held by the engine whatever the way in, and checked by the CLI before asking."""
    for name, text in fields.items():
        if name == "value":
            check_length(text, MAX_VALUE, "a memory's text", "shorten it, or split it in two")
        elif name == "evidence":
            check_length(text, MAX_VALUE, "its evidence", SHORTER)
        else:
            check_length(text, MAX_LABEL, f"its {name.replace('_', ' ')}", SHORTER)
