"""A statement the memory server refused, by its SQLSTATE, turned into one line that names
the cause and the fix (as failures.py does for a SQLite file).

A refusal that passes by itself (a read-only standby, a timeout, a restart, a full disk, too
many connections, a conflict with another writer) is ``StorageUnavailable``: a chat turn keeps
its message in the outbox and sends it once the server takes it (pg/buffered.py). One that
stays until an administrator acts (a right revoked) is ``StorageRefused`` and names the grant.
Either way nothing of the refused statement's transaction was kept: the server rolled it back.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from navi_desktop.errors import InvalidInput, NaviError, StorageRefused, StorageUnavailable
from navi_desktop.memory.pg.connect import shown

NOT_KEPT = "nothing of this change was kept"
# Conflicts with another writer: the server rolled the transaction back and a new try may
# pass (BufferedStore retries them, RETRIES times in all).
CONFLICTS = ("40001", "40P01")
LOST = ("57P01", "57P02", "57P03")
NO_RIGHTS = "42501"
READ_ONLY = "25006"
RETRIES = 3


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver error, or of one that ``refusal`` made of it."""
    code = getattr(exc, "sqlstate", None)
    return code if isinstance(code, str) else None


def _who(dsn: str) -> str:
    try:
        user = urlsplit(dsn).username
    except ValueError:
        user = None
    return f"role {user}" if user else "this login's role"


def _text(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _passing(code: str, where: str, text: str) -> tuple[str, str] | None:
    """(cause, fix) for a refusal that passes by itself, None for another."""
    if code == READ_ONLY:
        return (
            f"memory server {where} refuses writes: it is read-only ({text}; a standby, or"
            " default_transaction_read_only)",
            "point [memory] dsn at the primary, or let its administrator make it writable;"
            " what you type in a chat is kept here meanwhile",
        )
    if code in ("57014", "55P03"):
        return (
            f"memory server {where} cancelled a statement ({text}: its statement_timeout or"
            " lock_timeout, while another session held a lock, e.g. a VACUUM FULL or a dump)",
            "try again once that work is done, or raise the role's statement_timeout",
        )
    if code in LOST or code.startswith("08"):
        return (
            f"memory server {where} closed the connection ({text}; it restarted, or an"
            " administrator ended the session)",
            "try again: Navi connects anew",
        )
    if code == "53100":
        return (
            f"memory server {where} has no disk space left ({text})",
            "free space on the server's disk (its data folder); everything saved before is intact",
        )
    if code == "53200":
        return (f"memory server {where} is out of memory ({text})", "try again later")
    if code == "53300":
        return (
            f"memory server {where} has no free connection ({text})",
            "close other clients, or raise its max_connections; try again later",
        )
    if code in CONFLICTS:
        return (
            f"memory server {where} rolled a change back for a conflict with another writer"
            f" ({text})",
            "try again",
        )
    return None


def refusal(exc: BaseException, dsn: str) -> NaviError:
    """The error to report for ``exc``, a statement's driver error (asyncpg.PostgresError)."""
    code = sqlstate(exc) or ""
    where, text = shown(dsn), _text(exc)
    passing = _passing(code, where, text)
    error: NaviError
    if passing is not None:
        cause, fix = passing
        error = StorageUnavailable(f"{cause}; {NOT_KEPT}: {fix}")
        error.cause = cause
    elif code in ("22021", "22P05"):
        error = InvalidInput(
            f"memory server {where} cannot store this text ({text}): PostgreSQL text holds no"
            f" NUL character; {NOT_KEPT}: remove the NUL (\\u0000) from it and try again"
        )
    elif code == NO_RIGHTS:
        cause = f"memory server {where} refuses this to {_who(dsn)} ({text})"
        error = StorageRefused(
            f"{cause}; {NOT_KEPT}: ask its administrator to `GRANT SELECT, INSERT, UPDATE,"
            " DELETE ON ALL TABLES IN SCHEMA navi TO PUBLIC` (or to that role)"
        )
        error.cause = cause
    else:
        cause = f"memory server {where} refused a statement ({text}; SQLSTATE {code or '?'})"
        error = StorageRefused(
            f"{cause}; {NOT_KEPT}: check the server's log for the reason, then try again"
        )
        error.cause = cause
    error.sqlstate = code  # type: ignore[attr-defined]  # for callers that expect one
    return error
