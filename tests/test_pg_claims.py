"""A claim on the memory server (a session's processing, held for minutes by an advisory lock)
takes a connection of its own: sessions ending together once took the pool's every connection,
and the statements made under their claims waited for one in vain."""

from __future__ import annotations

import asyncio
import contextlib

from navi_desktop.memory.pg import PgMemoryStore
from navi_desktop.memory.pg import db as pg_db
from tests.pg_support import profile_name


async def test_sessions_processed_together_do_not_starve_the_pool(pg_dsn, monkeypatch):
    # A pool's connection is waited for this long before the call fails (30 s in use).
    monkeypatch.setattr(pg_db, "ACQUIRE_S", 2.0)
    async with await PgMemoryStore.open(pg_dsn, profile_name()) as store:
        sessions = [await store.create_session(f"session {n}") for n in range(6)]
        async with contextlib.AsyncExitStack() as claims:
            for session in sessions:  # more than the pool holds (4)
                assert await claims.enter_async_context(store.processing(session.id))
            attempts = await asyncio.gather(*(store.session_attempts(s.id) for s in sessions))
            assert attempts == [0] * len(sessions)
            # Claimed elsewhere meanwhile: not a second time.
            async with store.processing(sessions[0].id) as again:
                assert again is False
        async with store.processing(sessions[0].id) as after:
            assert after is True  # let go with its claim
