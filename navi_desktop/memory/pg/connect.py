"""Connecting to PostgreSQL: the DSN as shown to a user (password hidden), and each way a
connection can fail turned into one line that names the server and the fix."""

from __future__ import annotations

import re
import socket
from urllib.parse import urlsplit, urlunsplit

from navi_desktop.errors import StorageUnavailable


def shown(dsn: str) -> str:
    """The DSN with any password replaced by ***, safe for logs and messages."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "<unreadable dsn>"
    if parts.password is None:
        return re.sub(r"(password=)\S+", r"\1***", dsn)
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


START_HINT = (
    "start it (`navi memory server start`, after `python -m pip install"
    " 'navi-desktop[pgserver]'`, or a system PostgreSQL) or point [memory] dsn / NAVI_PG_DSN"
    " at a running one"
)


def closed_connection(dsn: str, text: str) -> StorageUnavailable:
    """A connection dropped mid-statement: the pool connects anew on the next call, and a
    daemon's chat turn and memory calls try once more by themselves (pg/buffered.py)."""
    closed = f"memory server {shown(dsn)} closed the connection ({text})"
    error = StorageUnavailable(f"{closed}: try again; Navi connects anew")
    error.cause = closed
    error.sqlstate = "08006"  # type: ignore[attr-defined]  # a lost connection's class
    return error


def explain(exc: BaseException, dsn: str) -> StorageUnavailable:
    """One line for a failed connection attempt."""
    import asyncpg  # the postgres extra; imported only when a profile lives on a server

    where = shown(dsn)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    refused = asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError
    if isinstance(exc, refused):
        if "SSL" in text or "encryption" in text or "hostssl" in text:
            return StorageUnavailable(
                f"memory server {where} requires TLS ({text}): add ?sslmode=require to the DSN"
            )
        return StorageUnavailable(
            f"memory server {where} refused the login ({text}): check the user and password"
            " in [memory] dsn or NAVI_PG_DSN"
        )
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return StorageUnavailable(
            f"memory server {where}: {text}: create it (`createdb`) or fix the DSN's database"
        )
    if isinstance(exc, OSError | socket.gaierror | TimeoutError | asyncpg.CannotConnectNowError):
        return StorageUnavailable(f"memory server {where} is not reachable ({text}): {START_HINT}")
    # A DSN asyncpg cannot use (its parser's ValueError, a bad option, a port past 65535)
    # is checked before InterfaceError, which ClientConfigurationError also is: no retry
    # mends it.
    if isinstance(exc, ValueError | OverflowError | asyncpg.ClientConfigurationError):
        return StorageUnavailable(
            f"memory server DSN {where} is not valid ({text}): fix [memory] dsn or NAVI_PG_DSN"
        )
    if isinstance(exc, asyncpg.InterfaceError | asyncpg.ConnectionDoesNotExistError):
        return closed_connection(dsn, text)
    if isinstance(exc, asyncpg.PostgresError):  # refused once connected (too many, a restart)
        from navi_desktop.memory.pg.refusals import refusal

        error = refusal(exc, dsn)
        if isinstance(error, StorageUnavailable):
            return error
    return StorageUnavailable(f"memory server {where}: {text}")
