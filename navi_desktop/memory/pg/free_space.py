"""The server's free space after a forget: a deleted or updated row stays in its table's pages
(and its TOAST and index pages) until a VACUUM marks them free, and only VACUUM FULL rewrites
a table without them. Both run on every table of Navi's schema, read from the catalog, so a
table added later is covered. A forget records its scrub as pending (ids and times, never
text) with its other changes and clears that once the VACUUM ran; when it cannot run (the
tables are another role's, a lock, a server that stops answering), it stays pending, with the
reason, for ``retry_scrubs``: the forget itself is saved either way."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import NaviError
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.pg.db import BASE_SETTINGS, CLOSE_S, QUERY_S, SCHEMA
from navi_desktop.memory.scrub import PENDING_KEY, UNFINISHED

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore

log = logging.getLogger(__name__)
COMPACT = "navi memory compact"
NOT_OWNER = (
    "the server's tables belong to a role this login is not: autovacuum frees the space in"
    f" time, or their owner runs `{COMPACT}`"
)
# A maintenance statement waits at most LOCK_S for a table another session holds (an index
# build, a pg_dump) and runs at most QUERY_S in all; VACUUM FULL copies the table and rebuilds
# its indexes, so it gets a second more per FULL_BYTES_PER_S of the table. Bounded on the
# client too: a frozen server runs no timer of its own.
LOCK_S = 10.0
FULL_BYTES_PER_S = 4 * 1024 * 1024


class VacuumFailed(NaviError):
    """A VACUUM (or ANALYZE) that did not finish: the line says why; nothing is lost."""


def _failure(exc: BaseException, shown: str) -> VacuumFailed:
    if isinstance(exc, TimeoutError):
        why = "it did not answer in time"
    else:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        why = text
    error = VacuumFailed(f"memory server {shown}: its VACUUM did not finish ({why})")
    error.cause = f"the server's VACUUM did not finish ({why})"
    return error


class PgFreeSpaceOps:
    async def _as_owner(
        self: PgMemoryStore, verb: str, tables: tuple[str, ...] | None = None
    ) -> bool:
        """Run ``verb`` (VACUUM, VACUUM FULL, ANALYZE) on ``tables`` (default: every table of
        the schema) as the login role, which may own the tables where the working role
        (navi_local, for a superuser login) does not; False, running nothing, when the login
        may not either (PostgreSQL would skip them silently with a warning). A connection of
        its own, closed after: a pooled one must never be left as a role that bypasses the
        profile's row-level security. VacuumFailed when a statement fails or is not answered."""
        import asyncpg

        failures = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)
        # The login's own role: not the profile's settings (its working role, its id).
        conn = await self.db.connect_alone(
            {**BASE_SETTINGS, "lock_timeout": f"{int(LOCK_S * 1000)}"}, QUERY_S
        )
        try:
            sizes = await conn.fetch(
                "SELECT c.oid::regclass::text AS name, pg_total_relation_size(c.oid) AS bytes,"
                " pg_has_role(c.relowner, 'USAGE') AS mine FROM pg_class c"
                " WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'r'"
                " AND ($2::text[] IS NULL OR c.relname = ANY($2::text[])) ORDER BY c.relname",
                SCHEMA,
                None if tables is None else list(tables),
            )
            may = await conn.fetchval(
                "SELECT rolsuper OR pg_has_role((SELECT datdba FROM pg_database"
                "  WHERE datname = current_database()), 'USAGE')"
                " FROM pg_roles WHERE rolname = current_user"
            )
            allowed = may or all(r["mine"] for r in sizes)
            for row in sizes if allowed else []:
                bound = QUERY_S
                if verb == "VACUUM FULL":
                    bound += row["bytes"] / FULL_BYTES_PER_S
                await conn.execute(f"SET statement_timeout = {int(bound * 1000)}")
                # a second more than the server's own bound, so a live one names the cause
                await conn.execute(f"{verb} {row['name']}", timeout=bound + 1.0)
        except failures as exc:
            conn.terminate()  # nothing to say to a server that failed or stopped answering
            raise _failure(exc, self.db.shown) from exc
        except BaseException:  # cancelled: the connection goes with the task
            conn.terminate()
            raise
        try:
            await asyncio.wait_for(conn.close(), CLOSE_S)
        except Exception:  # a server that does not answer is not waited for
            conn.terminate()
        return allowed

    async def _owner_role(self: PgMemoryStore) -> str:
        async with self.db.reading():
            return str(
                await self.db.scalar(
                    "SELECT pg_catalog.pg_get_userbyid(relowner) FROM pg_catalog.pg_class"
                    " WHERE oid = pg_catalog.to_regclass($1)",
                    (f"{SCHEMA}.users",),
                )
            )

    async def vacuum(self: PgMemoryStore, *, full: bool = False) -> bool:
        """Mark the dead rows' space free (``full``: rewrite the tables, an admin's compact).
        VACUUM cannot run in a transaction: one statement per table. False when this login
        may not (see ``_as_owner``)."""
        verb = "VACUUM FULL" if full else "VACUUM"
        done = await self._as_owner(verb)
        if full and not done:
            owner = await self._owner_role()
            raise NaviError(
                f"memory server {self.db.shown}: only the owner of Navi's tables (role"
                f" {owner}) or a superuser may compact them: run `{COMPACT}` logged in as"
                " that role"
            )
        return done

    async def compact(self: PgMemoryStore) -> dict[str, Any]:
        """VACUUM FULL every table of the schema: they are rewritten, so no free space keeps
        the old rows, and the pending scrubs are done. Needs the tables' owner (an admin);
        the sizes before and after, in bytes (the whole database: other profiles share the
        tables)."""
        size = "SELECT pg_database_size(current_database())"
        async with self.db.reading():
            before = await self.db.scalar(size)
        pending = await self._pending_now()  # each is done by this, vacuumed since or not
        await self.vacuum(full=True)
        # VACUUM FULL leaves the tables' vacuum times as they were: a plain VACUUM after it
        # (quick on rewritten tables) dates them, so other profiles' waiting scrubs end too.
        # The tables are rewritten already: one that fails only leaves those waiting longer.
        try:
            await self.vacuum()
        except VacuumFailed as exc:
            log.info("the tables were compacted, not dated: %s", exc)
        await self._clear_pending(pending)
        async with self.db.reading():
            after = await self.db.scalar(size)
        return {"bytes_before": int(before), "bytes_after": int(after)}

    async def _note_session_deleted(self: PgMemoryStore, session_id: str) -> None:
        """Inside a session's delete: its rows owe the tables' dead space a VACUUM."""
        await self._note_pending([], UNFINISHED)

    async def _session_deleted(self: PgMemoryStore, session_id: str) -> None:
        """After the delete: its rows out of the tables' dead space (or noted why not)."""
        await self._purge_free_space([])

    async def _note_pending(self: PgMemoryStore, ids: list[int], reason: str) -> None:
        """Record a scrub as unfinished (inside a transaction); ids and times, never text.
        ``server_since``: the server's clock, which dates its tables' vacuums too."""
        pending = [p for p in await self._pending() if p["ids"] != ids]
        server_now = await self.db.scalar(
            "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
        )
        pending.append(
            {"ids": ids, "since": now_iso(), "reason": reason, "server_since": server_now}
        )
        await self._set_meta(PENDING_KEY, json.dumps(pending))

    async def _purge_free_space(self: PgMemoryStore, ids: list[int]) -> str | None:
        """VACUUM the tables; clears the pending record of ``ids`` once done, else records
        why it waits. Returns that reason, or None when done. Never raises for the server:
        the forget before it is saved, and its pending record is already on the server."""
        try:
            if await self.vacuum():
                await self._clear_pending([p for p in await self._pending_now() if p["ids"] == ids])
                return None
            reason = NOT_OWNER
        except NaviError as exc:
            reason = f"{exc.without_advice()}: Navi retries it, or `{COMPACT}` finishes it now"
        log.info("forgotten text stays in the server's free space: %s", reason)
        try:
            async with self.db.transaction():
                await self._note_pending(ids, reason)
        except NaviError as exc:  # the record saved with the forget says it did not finish
            log.info("the reason a scrub waits was not saved: %s", exc)
        return reason

    async def _pending(self: PgMemoryStore) -> list[dict[str, Any]]:
        raw = await self.db.scalar("SELECT value FROM meta WHERE key = $1", (PENDING_KEY,))
        return json.loads(raw) if raw else []

    async def _pending_now(self: PgMemoryStore) -> list[dict[str, Any]]:
        async with self.db.reading():
            return await self._pending()

    async def _clear_pending(self: PgMemoryStore, done: list[dict[str, Any]]) -> None:
        """Drop these records; one added meanwhile (a forget after the VACUUM) stays."""
        if not done:
            return
        async with self.db.transaction():
            left = [p for p in await self._pending() if p not in done]
            await self._set_meta(PENDING_KEY, json.dumps(left) if left else None)

    async def pending_scrubs(self: PgMemoryStore) -> list[dict[str, Any]]:
        """Forgets whose rows may still be in the tables' dead space: ``ids``, ``since``,
        ``reason``. Not one that every table was vacuumed since, by anyone (autovacuum, the
        owner's compact): a login that may not vacuum saw its scrubs waiting for ever."""
        pending = await self._pending_now()
        done = await self._vacuumed_since(pending)
        return [p for p in pending if p not in done]

    async def _vacuumed_since(self: PgMemoryStore, pending: list[Any]) -> list[Any]:
        """The records of ``pending`` after whose time every table of the schema was
        vacuumed (the server's clock both: no machine's clock is compared with it)."""
        dated = [(p, when) for p in pending if (when := _server_time(p)) is not None]
        if not dated:
            return []
        async with self.db.reading():
            oldest = await self.db.scalar(
                "SELECT CASE WHEN bool_and(greatest(last_vacuum, last_autovacuum) IS NOT NULL)"
                " THEN min(greatest(last_vacuum, last_autovacuum)) END"
                " FROM pg_stat_all_tables WHERE schemaname = $1",
                (SCHEMA,),
            )
        if oldest is None:
            return []
        return [p for p, when in dated if when < oldest]

    async def retry_scrubs(self: PgMemoryStore, wait_ms: int = 250) -> list[dict[str, Any]]:
        """Try the pending scrubs again; returns the ones now complete. (``wait_ms`` is the
        SQLite side's wait for readers; VACUUM on a server does not wait for them.) A VACUUM
        that fails again leaves them for the next try."""
        pending = await self._pending_now()
        vacuumed = await self._vacuumed_since(pending)
        await self._clear_pending(vacuumed)  # done by another's vacuum meanwhile
        before = [p for p in pending if p not in vacuumed]
        if not before:
            return vacuumed
        try:
            if not await self.vacuum():
                return vacuumed
        except VacuumFailed as exc:
            log.info("a forget's VACUUM still waits: %s", exc)
            return vacuumed
        await self._clear_pending(before)
        return vacuumed + before


def _server_time(record: Any) -> datetime | None:
    """When the server noted a waiting scrub; None for a record without a readable time (an
    older version's, or one damaged): it waits for this profile's own VACUUM, as before."""
    with contextlib.suppress(KeyError, TypeError, ValueError):
        when = datetime.fromisoformat(record["server_since"])
        return when if when.tzinfo is not None else None
    return None


__all__ = ["NOT_OWNER", "PgFreeSpaceOps", "VacuumFailed"]
