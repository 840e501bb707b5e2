"""The injection ledger: which memories went into which turn's prompt, and why."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import NotFound
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.models import Memory, Signal

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore


@dataclass(frozen=True)
class Injection:
    """One memory put into one turn's prompt, with its rank and the signals that chose it."""

    memory_id: int
    rank: int
    score: float
    signals: dict[str, Signal]
    reason: str  # "relevant", "rule", "profile", "summary"
    memory: Memory | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "memory_id": self.memory_id,
            "rank": self.rank,
            "score": self.score,
            "signals": {k: asdict(v) for k, v in self.signals.items()},
            "reason": self.reason,
            "memory": self.memory.to_dict() if self.memory else None,
        }


def signals_json(injection: Injection) -> str:
    """How a ledger row keeps an injection's reason and signals."""
    signals = {k: asdict(v) for k, v in injection.signals.items()}
    return json.dumps({"reason": injection.reason, **signals})


def injection_from_row(row: Any) -> Injection:
    """A ledger row joined with its memory (the memory's columns, and ``i_rank``,
    ``i_score``, ``i_signals``) as the injection it records."""
    data = json.loads(row["i_signals"])
    reason = data.pop("reason", "relevant")
    return Injection(
        memory_id=row["id"],
        rank=row["i_rank"],
        score=row["i_score"],
        signals={k: Signal(**v) for k, v in data.items()},
        reason=reason,
        memory=Memory.from_row(row),
    )


def check_turn(
    session_found: bool, owner: str | None, session_id: str, message_id: int | None
) -> None:
    """A ledger row names its session and (when there is one) the session's user message:
    ``owner`` is the session that message is in (None: no such message)."""
    if not session_found:
        raise NotFound(f"no session with id {session_id!r}")
    if message_id is not None and owner != session_id:
        raise NotFound(f"no message {message_id} in session {session_id!r}")


class LedgerOps:
    async def record_injections(
        self: MemoryStore, session_id: str, message_id: int | None, injections: list[Injection]
    ) -> None:
        """Record a turn's injected memories and mark them used (recall slows their decay)."""
        if not injections:
            return
        at = now_iso()
        async with self.db.transaction():
            turn = await self.db.fetchone(
                "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?),"
                " (SELECT session_id FROM messages WHERE id = ?)",
                (session_id, message_id),
            )
            check_turn(bool(turn[0]), turn[1], session_id, message_id)
            await self.db.executemany(
                "INSERT INTO injections (session_id, message_id, memory_id, rank, score, signals,"
                " at) SELECT ?, ?, ?, ?, ?, ?, ?"
                " WHERE EXISTS (SELECT 1 FROM memories WHERE id = ?)",
                [
                    (
                        session_id,
                        message_id,
                        i.memory_id,
                        i.rank,
                        i.score,
                        signals_json(i),
                        at,
                        i.memory_id,
                    )
                    for i in injections
                ],
            )
            await self._mark_used([i.memory_id for i in injections], at)

    async def injections_for(self: MemoryStore, message_id: int) -> list[Injection]:
        """What was put into the prompt answering this user message ("what did you use?")."""
        async with self.db.reading():
            rows = await self.db.fetchall(
                "SELECT m.*, i.rank AS i_rank, i.score AS i_score, i.signals AS i_signals"
                " FROM injections i JOIN memories m ON m.id = i.memory_id"
                " WHERE i.message_id = ? ORDER BY i.rank",
                (message_id,),
            )
        return [injection_from_row(row) for row in rows]
