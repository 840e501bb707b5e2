"""Errors a user can cause or meet, each with a message that names the cause and the fix."""


class NaviError(Exception):
    """Base class: ``str(err)`` is one line fit to show a user."""

    cause: str | None = None  # the line without its advice, where the raiser splits them

    def without_advice(self) -> str:
        """The cause alone, for a caller whose situation needs other advice (the whole line
        when the raiser did not split it)."""
        return self.cause or str(self)


class InvalidInput(NaviError):
    """The request itself is wrong (unknown id, bad value, unreadable file)."""


class NotFound(InvalidInput):
    """An id that names nothing."""


class CorruptDatabase(NaviError):
    """The file at a profile path is not a usable Navi memory database."""


class ProfileError(CorruptDatabase):
    """A profile's file cannot be used as it is. The message names the file, what is wrong
    and the fix; the file was left untouched. The subclass names what is wrong (the
    ``data.kind`` of the daemon's error reply)."""


class ProfileDamaged(ProfileError):
    """Truncated, overwritten, or SQLite found it malformed."""


class ProfileForeign(ProfileError):
    """A SQLite file, but not a Navi memory file."""


class ProfileUnreadable(ProfileError):
    """No permission, or not a regular file (a folder at the file's path)."""


class ProfileMoved(ProfileError):
    """The file was moved, deleted or replaced by another program while Navi had it open."""


class ProfileTooNew(ProfileError):
    """Written by a newer Navi, with a schema this version does not know."""


class DiskFull(NaviError):
    """A write failed for lack of space: nothing of it was kept, what was saved before is
    intact, and writing works again once space is freed."""


class DiskError(NaviError):
    """The disk reported an I/O error that is not a full disk (and not, by itself, damage)."""


class StorageUnavailable(NaviError):
    """The memory server cannot be used right now (down, refused, auth, TLS). The message
    names the server (password hidden) and the fix."""


class StorageRefused(NaviError):
    """The memory server refuses a request, and will until its administrator changes
    something (a right, a setting): no retry mends it. The message names the grant or the
    setting; the server kept nothing of the refused change."""
