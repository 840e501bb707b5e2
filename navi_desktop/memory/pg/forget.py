"""Forgetting on the server: the memory, its earlier versions and every copy of its text
leave every table and index; keyed-hash tombstones stay (the SQLite side's rules, forget.py).

The places and what each becomes are the SQLite side's (scrub_plan.py, through pg/scrub.py).
Afterwards the touched tables are VACUUMed so the dead rows' space is marked free; where the
login may not (the tables are another role's), the scrub stays pending, with the reason, in
``pending_scrubs``. What a server can still hold after that (free space until reused, WAL
segments and archives, base backups) is said in the README; ``compact`` (VACUUM FULL)
rewrites the tables for their owner."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.forget import (
    ForgetCommon,
    ForgetReport,
    _check_scope,
    _needles,
)
from navi_desktop.memory.pg.db import PgDatabase
from navi_desktop.memory.scrub import UNFINISHED

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore

FORGET_LOCK = 0x4E415646 << 32  # "NAVF", plus the profile's id: other profiles never wait


class ProfileDatabase(PgDatabase):
    """One profile's connections. Every transaction takes the profile's forget lock first,
    shared, and a forget takes it alone: a save on another connection (another daemon) that
    checked the forgotten list before a forget began commits before the forget looks, so the
    forget finds and scrubs it, and one that begins after waits for the forget and then sees
    its tombstones. Without it a save in flight when a forget scanned kept the value."""

    lock_key = FORGET_LOCK

    @asynccontextmanager
    async def transaction(
        self, *, alone: bool = False, snapshot: bool = False
    ) -> AsyncIterator[Any]:
        """``snapshot``: read only, every statement seeing the same moment (a copy)."""
        held = self._current.get()
        first = held is None or not held.is_in_transaction()  # else a savepoint in it
        async with super().transaction() as conn:
            if first:
                if snapshot:  # before any query, as PostgreSQL requires
                    await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                lock = "pg_advisory_xact_lock" if alone else "pg_advisory_xact_lock_shared"
                await conn.execute(f"SELECT {lock}($1)", self.lock_key)
            yield conn


class PgForgetOps(ForgetCommon):
    # -- forget --------------------------------------------------------------------------------

    async def forget(
        self: PgMemoryStore, memory_id: int, actor: str = "user", *, scope: str = "everywhere"
    ) -> ForgetReport:
        """Remove a memory and every trace of it (see the module's docstring)."""
        _check_scope(scope)
        report = ForgetReport(scope=scope)
        outside = await self._forget_outside(memory_id, scope)
        async with self.db.transaction(alone=True):
            chain = await self._chain(memory_id)
            matcher, same = _needles(chain, scope)
            plan = await self._plan_scrub(matcher, {r["id"] for r in chain}, same)
            gone = [*chain, *plan.also_forgotten]
            for row in gone:
                fact_hash, value_hash = await self._tomb_hashes(
                    row["kind"], row["norm_key"], row["value"]
                )
                await self.db.execute(
                    "INSERT INTO tombstones (fact_hash, value_hash, kind, created_at)"
                    " VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    (fact_hash, value_hash, row["kind"], now_iso()),
                )
            await self._bury_phrases(matcher.needles)
            ids = [r["id"] for r in gone]
            # history, vectors, entity links and ledger rows go with the rows (cascade)
            await self.db.execute(
                "UPDATE memories SET superseded_by = NULL WHERE superseded_by = ANY($1::bigint[])",
                (ids,),
            )
            await self.db.execute("DELETE FROM memories WHERE id = ANY($1::bigint[])", (ids,))
            await self._apply_scrub(plan)
            await self._drop_orphan_entities()
            await self._mark_profile_stale()
            # Saved with the forget: a VACUUM that cannot run leaves it to retry_scrubs.
            await self._note_pending(ids, UNFINISHED)
            report.forgotten = ids
            report.redacted_messages = plan.counts.messages
            report.redacted = plan.counts.lines()
        report.scrub_pending = await self._purge_free_space(ids)
        await self._scrub_outside(outside)
        return report


__all__ = ["PgForgetOps", "ProfileDatabase"]
