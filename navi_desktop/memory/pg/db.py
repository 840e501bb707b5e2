"""A pool of asyncpg connections to the memory server, with the same shape of use as the
SQLite side: ``transaction()`` and ``reading()`` scopes, and statements run on the scope's
connection (a context variable holds it, so nested scopes share one connection)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from navi_desktop.errors import InvalidInput
from navi_desktop.memory.export_format import without_nuls
from navi_desktop.memory.pg.connect import StorageUnavailable, closed_connection, explain, shown
from navi_desktop.memory.pg.refusals import refusal, sqlstate

log = logging.getLogger(__name__)


class _OneLine(logging.Filter):
    """The driver's pool logs a traceback for each connection it fails to make again in the
    background (a server in recovery, a restart): one line in the daemon's log instead, as
    every other failure is said."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            record.msg = f"{record.getMessage()}: {type(exc).__name__}: {text}".rstrip(": ")
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


logging.getLogger("asyncpg.pool").addFilter(_OneLine())

SCHEMA = "navi"
# Every connection's, before a profile's own (its working role, its id).
BASE_SETTINGS = {"search_path": f"{SCHEMA}, public", "application_name": "navi"}
COUNT_MAX_AGE_S = 60.0
# Bounds on waiting for a server that stopped answering (connections open, nothing comes
# back). asyncpg waits, unbounded and shielded from cancellation, for the server to
# acknowledge a cancelled query before a connection returns to the pool, and for each
# connection to close: a frozen server then held up a cancelled task, and the daemon's
# stop, forever. A connection not back within RELEASE_S is dropped; a pool whose every
# connection stays busy for ACQUIRE_S says so in one line. A statement gets QUERY_S (a bulk
# one ROW_S more per row); schema upgrades and index builds, which may take minutes, run on
# the opening connection, which has no bound.
CONNECT_S = 5.0
QUERY_S = 60.0
ROW_S = 0.01
ACQUIRE_S = 30.0
RELEASE_S = 5.0
CLOSE_S = 5.0


class PgDatabase:
    read_only = False  # as a file's Database says: a server's is always opened to write
    replaces_nul = True  # see _storable

    def __init__(self, pool: Any, dsn: str, query_s: float | None = QUERY_S) -> None:
        self.pool = pool
        self.dsn = dsn
        self.query_s = query_s
        self._current: contextvars.ContextVar[Any] = contextvars.ContextVar(
            f"navi_pg_conn_{id(self)}", default=None
        )
        self._counts: dict[str, tuple[float, int]] = {}  # see recent_count
        self.server_settings: dict[str, str] = {}  # see connect, and claim

    @classmethod
    async def connect(
        cls,
        dsn: str,
        *,
        max_size: int = 4,
        timeout: float = CONNECT_S,
        query_s: float | None = QUERY_S,
        settings: dict[str, str] | None = None,
    ) -> PgDatabase:
        import asyncpg
        from pgvector.asyncpg import register_vector

        async def setup(conn: Any) -> None:
            # The vector type exists only once the extension does (the first open creates it).
            if await conn.fetchval("SELECT 1 FROM pg_type WHERE typname = 'vector'"):
                await register_vector(conn)

        server_settings = {**BASE_SETTINGS, **(settings or {})}
        try:
            pool = await asyncpg.create_pool(
                dsn,
                min_size=1,
                max_size=max_size,
                timeout=timeout,
                command_timeout=query_s,  # every statement, ROLLBACK and cancel included
                init=setup,
                server_settings=server_settings,
            )
        except Exception as exc:  # every connect failure becomes one line naming the server
            raise explain(exc, dsn) from exc
        db = cls(pool, dsn, query_s)
        db.server_settings = server_settings
        return db

    @property
    def shown(self) -> str:
        return shown(self.dsn)

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self.pool.close(), CLOSE_S)
        except TimeoutError:
            self.pool.terminate()  # a server that does not answer is not waited for

    async def reset_codecs(self) -> None:
        """After the vector extension was created: new connections register its codec."""
        await self.pool.expire_connections()

    async def recent_count(self, sql: str) -> int:
        """The count ``sql`` selects, read again only after COUNT_MAX_AGE_S: for figures that
        move slowly and only weigh or plan a search (a profile's links or vectors), where a
        count on every search cost a read of every row (~5 ms at 10k memories)."""
        now = time.monotonic()
        cached = self._counts.get(sql)
        if cached is None or now - cached[0] > COUNT_MAX_AGE_S:
            cached = self._counts[sql] = (now, int(await self.scalar(sql) or 0))
        return cached[1]

    def in_use(self) -> bool:
        """Whether this task is inside reading() or transaction() (holds a connection)."""
        return self._current.get() is not None

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[Any]:
        conn = self._current.get()
        if conn is not None:
            yield conn
            return
        async with self._acquire() as conn:
            token = self._current.set(conn)
            try:
                yield conn
            finally:
                self._current.reset(token)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        conn = self._current.get()
        if conn is not None:  # nested: a savepoint inside the caller's transaction
            async with conn.transaction():
                yield conn
            return
        async with self._acquire() as conn:
            token = self._current.set(conn)
            try:
                async with conn.transaction():
                    yield conn
            finally:
                self._current.reset(token)

    @asynccontextmanager
    async def claim(self) -> AsyncIterator[Any]:
        """A connection for the caller alone, e.g. to hold a session-level advisory lock
        across other statements. Not one of the pool's: a claim is held for minutes (a
        session's processing), and four sessions ending at once took the pool's every
        connection, so the statements made under their claims waited for one in vain."""
        conn = await self.connect_alone(self.server_settings, self.query_s)
        # Closed in CLOSE_S at most: asyncpg drops one whose close is not answered.
        async with self._held(conn, lambda: asyncio.wait_for(conn.close(), CLOSE_S)):
            yield conn

    async def connect_alone(self, settings: dict[str, str], query_s: float | None) -> Any:
        """A connection outside the pool, with ``settings``; a failure is one line naming
        the server, as the pool's are. The caller closes it."""
        import asyncpg

        try:
            return await asyncpg.connect(
                self.dsn, timeout=CONNECT_S, command_timeout=query_s, server_settings=settings
            )
        except Exception as exc:
            raise explain(exc, self.dsn) from exc

    @asynccontextmanager
    async def _acquire(self) -> AsyncIterator[Any]:
        import asyncpg

        lost = (OSError, *asyncpg_lost())
        started = time.monotonic()
        try:
            conn = await self.pool.acquire(timeout=ACQUIRE_S)
        except lost as exc:  # a timeout: a new connection, or a busy pool's free one
            raise self._lost(exc, f"within {time.monotonic() - started:.0f} s") from exc
        except asyncpg.PostgresError as exc:  # a new connection refused (too many, a restart)
            raise explain(exc, self.dsn) from exc
        async with self._held(conn, lambda: self.pool.release(conn, timeout=RELEASE_S)):
            yield conn

    @asynccontextmanager
    async def _held(self, conn: Any, give_back: Callable[[], Awaitable[Any]]) -> AsyncIterator[Any]:
        """``conn`` in use, a driver error on it as one line naming the cause and the fix;
        given back (to the pool, or closed) whatever happened."""
        import asyncpg

        lost = (OSError, *asyncpg_lost())
        try:
            yield conn
        except asyncpg.DataError as exc:  # a value the driver cannot send (out of range)
            raise InvalidInput(
                f"memory server {self.shown} cannot take a value ({_first_line(exc)}): fix"
                " it and try again; nothing of this change was kept"
            ) from exc
        except lost as exc:  # a timeout: a statement past its bound (QUERY_S)
            await self._drop_stale(exc)
            raise self._lost(exc, "a statement in time") from exc
        except asyncpg.InternalClientError as exc:
            # The driver out of step with the connection: the server ended the session while
            # it was idle (pg_terminate_backend, a restart) and its last words came before the
            # close, so the pool handed it out still open. Nothing was sent on it; the others
            # most likely went the same way.
            log.info("a connection to %s out of step: %s", self.shown, exc)
            conn.terminate()
            await self.pool.expire_connections()
            raise closed_connection(
                self.dsn, "it ended the session: a restart, or an administrator"
            ) from exc
        except asyncpg.PostgresError as exc:  # the server refused: one line, by its SQLSTATE
            await self._drop_stale(exc)
            raise refusal(exc, self.dsn) from exc
        finally:
            try:
                await give_back()
            except Exception as exc:  # asyncpg dropped the connection; the pool makes another
                log.debug("a connection to %s dropped on its return: %s", self.shown, exc)

    async def _drop_stale(self, exc: BaseException) -> None:
        """After a lost connection (a restart, a terminated backend), the pool's other idle
        connections are most likely gone too: each is made anew when next taken, so the next
        call does not fail on them one by one."""
        if isinstance(exc, OSError | TimeoutError):  # a slow statement: the others are fine
            return
        # A read-only refusal too: a failover may have made the server a standby, and new
        # connections reach the primary where the DSN now leads.
        code = sqlstate(exc) or ""
        if isinstance(exc, asyncpg_lost()) or code == "25006" or code.startswith(("08", "57P")):
            await self.pool.expire_connections()

    def _lost(self, exc: BaseException, waited: str) -> StorageUnavailable:
        """One line for a connection that failed (``explain``) or did not answer ``waited``
        (TimeoutError, an OSError: said apart, since explain would call it unreachable)."""
        if isinstance(exc, TimeoutError):
            return StorageUnavailable(
                f"memory server {self.shown} did not answer {waited}: check that it is"
                " running and reachable"
            )
        return explain(exc, self.dsn)

    def _conn(self) -> Any:
        conn = self._current.get()
        if conn is None:
            raise RuntimeError("statement outside reading() or transaction()")
        return conn

    async def execute(
        self, sql: str, params: Sequence[Any] = (), *, timeout: float | None = None
    ) -> int:
        """Run a statement; returns the rows it touched. ``timeout``: this statement's bound,
        for one known to be slow (default QUERY_S). Without parameters the text may hold
        several statements (a schema step)."""
        if not params:
            return _rowcount(await self._conn().execute(sql, timeout=timeout))
        params = self._storable(params)
        return _rowcount(await self._conn().execute(dollars(sql), *params, timeout=timeout))

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            bound = None if self.query_s is None else max(self.query_s, len(rows) * ROW_S)
            rows = [self._storable(row) for row in rows]
            await self._conn().executemany(dollars(sql), rows, timeout=bound)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return await self._conn().fetch(dollars(sql), *self._storable(params))

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any | None:
        return await self._conn().fetchrow(dollars(sql), *self._storable(params))

    async def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return await self._conn().fetchval(dollars(sql), *self._storable(params))

    def _storable(self, params: Sequence[Any]) -> Sequence[Any]:
        """``params`` with each NUL character in a text as U+FFFD: PostgreSQL text cannot
        hold one, while SQLite's (an import, a migrated file) and JSON can, and refusing it
        left a profile that could never move to the server. An import and a migration
        count them where the data comes in (count_nuls): here a text counts again in each
        search document and look-up it goes into."""
        if not any(map(_holds_nul, params)):
            return params
        log.debug("a NUL character in a text stored as U+FFFD")
        return [without_nuls(p) for p in params]


# A quoted literal (left as it is), or a placeholder in SQLite's forms: ?NNN or a bare ?.
_PLACEHOLDER = re.compile(r"'(?:[^']|'')*'|\$(\d+)|\?(\d*)")


@functools.lru_cache(maxsize=1024)
def dollars(sql: str) -> str:
    """SQL written with SQLite's placeholders, for PostgreSQL: ``?NNN`` becomes ``$NNN`` and a
    bare ``?`` the number after the largest one to its left, as SQLite numbers it; ``$n``
    stays. So a statement both backends run is written once, the file's way."""
    if "?" not in sql:
        return sql
    largest = 0

    def number(m: re.Match[str]) -> str:
        nonlocal largest
        if m.group(0).startswith("'"):
            return m.group(0)
        given = m.group(1) or m.group(2)
        n = int(given) if given else largest + 1
        largest = max(largest, n)
        return f"${n}"

    return _PLACEHOLDER.sub(number, sql)


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\0" in value
    return isinstance(value, list | tuple) and any(map(_holds_nul, value))


def asyncpg_lost() -> tuple[type[BaseException], ...]:
    import asyncpg

    return (asyncpg.InterfaceError, asyncpg.ConnectionDoesNotExistError)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _rowcount(status: str) -> int:
    """Rows a command touched, from its status tag ('UPDATE 3', 'INSERT 0 1')."""
    try:
        return int(status.rsplit(" ", 1)[-1])
    except (ValueError, IndexError):
        return 0


__all__ = ["CLOSE_S", "CONNECT_S", "SCHEMA", "PgDatabase", "StorageUnavailable"]


def numbered(sql: str, start: int) -> str:
    """A filter's SQL for PostgreSQL: ``?`` placeholders as $n numbered from ``start``, and
    SQLite's always-true ``1`` as ``true``."""
    count = iter(range(start, start + sql.count("?")))
    sql = re.sub(r"^1( AND |$)", lambda m: "true" + m.group(1), sql)
    return re.sub(r"\?", lambda _: f"${next(count)}", sql)
