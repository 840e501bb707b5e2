"""The injection ledger and reply feedback on the server. The rules (what a ledger row keeps,
what may be rated, how long ratings stay) are the SQLite side's (ledger.py, feedback.py); the
statements are PostgreSQL's."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import NotFound
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.feedback import (
    FEEDBACK_DAYS,
    Rating,
    check_rating,
    check_reply,
    feedback_cutoff,
    flagged,
)
from navi_desktop.memory.ledger import Injection, check_turn, injection_from_row, signals_json
from navi_desktop.memory.pg.db import rowcount
from navi_desktop.memory.pg.facts import MEMORY_COLUMNS

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore

_FEEDBACK_COLUMNS = "message_id, session_id, turn_id, rating, note, at"


class PgLedgerOps:
    # -- the injection ledger ------------------------------------------------------------------

    async def record_injections(
        self: PgMemoryStore,
        session_id: str,
        message_id: int | None,
        injections: list[Injection],
    ) -> None:
        """Record a turn's injected memories and mark them used (recall slows their decay);
        a memory that went meanwhile is left out."""
        if not injections:
            return
        at = now_iso()
        async with self.db.transaction():
            turn = await self.db.fetchone(
                "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1),"
                " (SELECT session_id FROM messages WHERE id = $2)",
                (session_id, message_id),
            )
            check_turn(turn[0], turn[1], session_id, message_id)
            await self.db.execute(
                "INSERT INTO injections (session_id, message_id, memory_id, rank, score, signals,"
                " at) SELECT $1, $2, t.memory_id, t.rank, t.score, t.signals, $3"
                " FROM unnest($4::bigint[], $5::int[], $6::float8[], $7::text[])"
                " WITH ORDINALITY AS t(memory_id, rank, score, signals, n)"
                " WHERE EXISTS (SELECT 1 FROM memories m WHERE m.id = t.memory_id) ORDER BY t.n",
                (
                    session_id,
                    message_id,
                    at,
                    [i.memory_id for i in injections],
                    [i.rank for i in injections],
                    [float(i.score) for i in injections],
                    [signals_json(i) for i in injections],
                ),
            )
            # Used: recall strengthens them (the SQLite side's ``_mark_used``).
            await self.db.execute(
                "UPDATE memories SET last_used_at = $1, strength = 1.0"
                " WHERE id = ANY($2::bigint[])",
                (at, [i.memory_id for i in injections]),
            )

    async def injections_for(self: PgMemoryStore, message_id: int) -> list[Injection]:
        """What was put into the prompt answering this user message ("what did you use?")."""
        columns = ", ".join("m." + c for c in MEMORY_COLUMNS.split(", "))
        async with self.db.reading():
            rows = await self.db.fetchall(
                f"SELECT {columns}, i.rank AS i_rank, i.score AS i_score,"
                " i.signals AS i_signals FROM injections i JOIN memories m ON m.id = i.memory_id"
                " WHERE i.message_id = $1 ORDER BY i.rank, i.id",
                (message_id,),
            )
        return [injection_from_row(row) for row in rows]

    # -- reply feedback ------------------------------------------------------------------------

    async def rate_reply(
        self: PgMemoryStore,
        session_id: str,
        rating: str,
        *,
        message_id: int | None = None,
        note: str | None = None,
    ) -> Rating:
        """Rate a reply of ``session_id`` (None: its last one); rating it again replaces the
        earlier rating."""
        value, note = check_rating(rating, note)
        async with self.db.transaction():
            if not await self.db.scalar("SELECT 1 FROM sessions WHERE id = $1", (session_id,)):
                raise NotFound(f"no session {session_id!r}")
            if message_id is None:
                message_id = await self.db.scalar(
                    "SELECT max(id) FROM messages WHERE session_id = $1 AND role = 'assistant'",
                    (session_id,),
                )
                if message_id is None:
                    raise NotFound(f"session {session_id!r} has no reply to rate yet")
            role = await self.db.scalar(
                "SELECT role FROM messages WHERE id = $1 AND session_id = $2",
                (message_id, session_id),
            )
            check_reply(role, message_id, session_id)
            turn_id = await self.db.scalar(
                "SELECT max(id) FROM messages WHERE session_id = $1 AND role = 'user' AND id < $2",
                (session_id, message_id),
            )
            at = now_iso()
            await self.db.execute(
                "INSERT INTO reply_feedback (message_id, session_id, turn_id, rating, note, at)"
                " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (message_id) DO UPDATE SET"
                " rating = excluded.rating, note = excluded.note, at = excluded.at",
                (message_id, session_id, turn_id, value, note, at),
            )
        return Rating(message_id, session_id, turn_id, rating, note, at)

    async def rating_of(self: PgMemoryStore, message_id: int) -> Rating | None:
        async with self.db.reading():
            row = await self.db.fetchone(
                f"SELECT {_FEEDBACK_COLUMNS} FROM reply_feedback WHERE message_id = $1",
                (message_id,),
            )
        return Rating.from_row(row) if row else None

    async def ratings(self: PgMemoryStore, session_id: str) -> list[Rating]:
        """A session's ratings, oldest first (the TUI marks rated replies)."""
        async with self.db.reading():
            rows = await self.db.fetchall(
                f"SELECT {_FEEDBACK_COLUMNS} FROM reply_feedback WHERE session_id = $1"
                " ORDER BY message_id",
                (session_id,),
            )
        return [Rating.from_row(r) for r in rows]

    async def feedback_counts(self: PgMemoryStore) -> dict[str, int]:
        async with self.db.reading():
            row = await self.db.fetchone(
                "SELECT count(*) FILTER (WHERE rating > 0) AS up,"
                " count(*) FILTER (WHERE rating < 0) AS down FROM reply_feedback"
            )
        return {"up": row["up"], "down": row["down"]}

    async def flagged_memories(self: PgMemoryStore) -> dict[int, dict[str, Any]]:
        """Memories that went into down-rated replies: id → how many such replies, and the
        newest rating's time and note. For review only: nothing changes them automatically."""
        async with self.db.reading():
            rows = await self.db.fetchall(
                "SELECT i.memory_id, count(DISTINCT f.message_id) AS replies, max(f.at) AS at,"
                " (SELECT f2.note FROM reply_feedback f2 JOIN injections i2"
                "  ON i2.message_id = f2.turn_id WHERE i2.memory_id = i.memory_id"
                "  AND f2.rating < 0 ORDER BY f2.at DESC LIMIT 1) AS note"
                " FROM reply_feedback f JOIN injections i ON i.message_id = f.turn_id"
                " WHERE f.rating < 0 GROUP BY i.memory_id ORDER BY i.memory_id"
            )
        return flagged(rows)

    async def purge_feedback(
        self: PgMemoryStore, *, days: int = FEEDBACK_DAYS, now: datetime | None = None
    ) -> int:
        """Delete ratings older than ``days``; returns how many."""
        cutoff = feedback_cutoff(days, now)
        async with self.db.transaction():
            return rowcount(
                await self.db.execute("DELETE FROM reply_feedback WHERE at < $1", (cutoff,))
            )
