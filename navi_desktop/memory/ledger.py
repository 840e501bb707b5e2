"""The injection ledger: which memories went into which turn's prompt, and why."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

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


class LedgerOps:
    async def record_injections(
        self: MemoryStore, session_id: str, message_id: int | None, injections: list[Injection]
    ) -> None:
        """Record a turn's injected memories and mark them used (recall slows their decay)."""
        if not injections:
            return
        at = now_iso()
        async with self.db.transaction():
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
                        json.dumps(
                            {"reason": i.reason, **{k: asdict(v) for k, v in i.signals.items()}}
                        ),
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
        out = []
        for row in rows:
            data = json.loads(row["i_signals"])
            reason = data.pop("reason", "relevant")
            out.append(
                Injection(
                    memory_id=row["id"],
                    rank=row["i_rank"],
                    score=row["i_score"],
                    signals={k: Signal(**v) for k, v in data.items()},
                    reason=reason,
                    memory=Memory.from_row(row),
                )
            )
        return out
