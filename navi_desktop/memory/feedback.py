"""Reply feedback: the user rates a reply up or down, with an optional note.

A rating is kept with the turn's ledger (the user message the reply answered), so "what did
you use?" can show which memories were in a badly rated reply; those memories are flagged
for review in the inspector and never changed because of it. Ratings are kept
``FEEDBACK_DAYS`` and then purged by maintenance. A note is the user's own text: forgetting
scrubs it like a message (``scrub.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.memory.clock import iso, now_iso

if TYPE_CHECKING:
    from navi_desktop.memory.backends import Store

FEEDBACK_DAYS = 180
MAX_NOTE = 2000
RATINGS = {"up": 1, "down": -1}
FEEDBACK_COLUMNS = "message_id, session_id, turn_id, rating, note, at"


@dataclass(frozen=True)
class Rating:
    """One reply's rating; ``turn_id`` is the user message whose ledger the reply used."""

    message_id: int
    session_id: str
    turn_id: int | None
    rating: str  # "up" or "down"
    note: str | None
    at: str

    @classmethod
    def from_row(cls, row: Any) -> Rating:
        return cls(
            message_id=row["message_id"],
            session_id=row["session_id"],
            turn_id=row["turn_id"],
            rating="up" if row["rating"] > 0 else "down",
            note=row["note"],
            at=row["at"],
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_rating(rating: str, note: str | None) -> tuple[int, str | None]:
    """The stored form of a rating and its note; a clear error for anything else."""
    if rating not in RATINGS:
        raise InvalidInput(f"a rating is 'up' or 'down', not {rating!r}")
    note = (note or "").strip() or None
    if note is not None and len(note) > MAX_NOTE:
        raise InvalidInput(f"a note is at most {MAX_NOTE} characters (this one: {len(note)})")
    return RATINGS[rating], note


def check_reply(role: str | None, message_id: int, session_id: str) -> None:
    """Only a reply of the session is rated: ``role`` is the message's there (None: none)."""
    if role is None:
        raise NotFound(f"no message {message_id} in session {session_id!r}")
    if role != "assistant":
        raise InvalidInput(f"message {message_id} is not a reply: only replies are rated")


def feedback_cutoff(days: int, now: datetime | None) -> str:
    """Ratings stored before this time are past their retention."""
    return iso((now or datetime.now(UTC)) - timedelta(days=days))


def flagged(rows: list[Any]) -> dict[int, dict[str, Any]]:
    """``flagged_memories``' answer from its rows (memory_id, replies, at, note)."""
    return {
        r["memory_id"]: {"down_rated_replies": r["replies"], "at": r["at"], "note": r["note"]}
        for r in rows
    }


class FeedbackOps:
    async def rate_reply(
        self: Store,
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
            if not await self.db.scalar("SELECT 1 FROM sessions WHERE id = ?", (session_id,)):
                raise NotFound(f"no session {session_id!r}")
            if message_id is None:
                message_id = await self.db.scalar(
                    "SELECT max(id) FROM messages WHERE session_id = ? AND role = 'assistant'",
                    (session_id,),
                )
                if message_id is None:
                    raise NotFound(f"session {session_id!r} has no reply to rate yet")
            role = await self.db.scalar(
                "SELECT role FROM messages WHERE id = ? AND session_id = ?",
                (message_id, session_id),
            )
            check_reply(role, message_id, session_id)
            turn_id = await self.db.scalar(
                "SELECT max(id) FROM messages WHERE session_id = ? AND role = 'user' AND id < ?",
                (session_id, message_id),
            )
            at = now_iso()
            await self.db.execute(
                "INSERT INTO reply_feedback (message_id, session_id, turn_id, rating, note, at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (message_id) DO UPDATE SET"
                " rating = excluded.rating, note = excluded.note, at = excluded.at",
                (message_id, session_id, turn_id, value, note, at),
            )
        return Rating(message_id, session_id, turn_id, rating, note, at)

    async def rating_of(self: Store, message_id: int) -> Rating | None:
        async with self.db.reading():
            row = await self.db.fetchone(
                f"SELECT {FEEDBACK_COLUMNS} FROM reply_feedback WHERE message_id = ?",
                (message_id,),
            )
        return Rating.from_row(row) if row else None

    async def ratings(self: Store, session_id: str) -> list[Rating]:
        """A session's ratings, oldest first (the TUI marks rated replies)."""
        async with self.db.reading():
            rows = await self.db.fetchall(
                f"SELECT {FEEDBACK_COLUMNS} FROM reply_feedback WHERE session_id = ?"
                " ORDER BY message_id",
                (session_id,),
            )
        return [Rating.from_row(r) for r in rows]

    async def feedback_counts(self: Store) -> dict[str, int]:
        async with self.db.reading():
            row = await self.db.fetchone(
                "SELECT count(*) FILTER (WHERE rating > 0) AS up,"
                " count(*) FILTER (WHERE rating < 0) AS down FROM reply_feedback"
            )
        return {"up": row["up"], "down": row["down"]}

    async def flagged_memories(self: Store) -> dict[int, dict[str, Any]]:
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
        self: Store, *, days: int = FEEDBACK_DAYS, now: datetime | None = None
    ) -> int:
        """Delete ratings older than ``days``; returns how many."""
        cutoff = feedback_cutoff(days, now)
        async with self.db.transaction():
            return await self.db.execute("DELETE FROM reply_feedback WHERE at < ?", (cutoff,))
