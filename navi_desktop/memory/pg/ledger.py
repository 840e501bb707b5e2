"""The injection ledger on the server. What a ledger row keeps is the SQLite side's rule
(ledger.py); the statements are PostgreSQL's. Reply feedback is the file's code
(feedback.py), run on the server's database."""

from __future__ import annotations

from typing import TYPE_CHECKING

from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.facts import MEMORY_COLUMNS
from navi_desktop.memory.ledger import Injection, check_turn, injection_from_row, signals_json

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore


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
