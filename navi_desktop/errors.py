"""Errors a user can cause or meet, each with a message that names the cause and the fix."""


class NaviError(Exception):
    """Base class: ``str(err)`` is one line fit to show a user."""


class InvalidInput(NaviError):
    """The request itself is wrong (unknown id, bad value, unreadable file)."""


class NotFound(InvalidInput):
    """An id that names nothing."""


class CorruptDatabase(NaviError):
    """The file at a profile path is not a usable Navi memory database."""
