"""A real PostgreSQL for the tests: pgserver's bundled PostgreSQL 16 with pgvector, started
once per test run in a temp folder, or the server NAVI_TEST_PG_DSN names (e.g. one with
pg_trgm). Each test gets its own profile (a user row), so tests share the server safely."""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlsplit, urlunsplit

TEST_DSN_ENV = "NAVI_TEST_PG_DSN"


def start_server(folder: str) -> tuple[str, object | None]:
    """(superuser DSN, the pgserver handle to stop) for the test run."""
    dsn = os.environ.get(TEST_DSN_ENV)
    if dsn:
        return dsn, None
    from navi_desktop.cli.server import import_pgserver

    server = import_pgserver().get_server(folder, cleanup_mode="stop")
    return server.get_uri(), server


def as_role(dsn: str, role: str) -> str:
    """The same server and database, logged in as ``role`` (no password: local trust)."""
    parts = urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


def in_database(dsn: str, database: str) -> str:
    """The same server and login, on another database."""
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{database}"))


def profile_name() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


async def run_sql(dsn: str, *statements: str) -> None:
    """Each statement on a connection of its own (an administrator's, beside Navi's)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()
