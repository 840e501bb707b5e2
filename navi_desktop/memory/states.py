"""A memory's standing: pinned, confirmed by the user, archived, restored, accepted from the
review inbox. Each change is one transaction with its history row. The file and the server
run the same statements (the server's database numbers the placeholders)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from navi_desktop.errors import InvalidInput
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.models import Memory
from navi_desktop.paths import profile_flag

if TYPE_CHECKING:
    from navi_desktop.memory.backends import Store

# The statuses each change may start from (the rules; each backend states the SQL).
PINNABLE = ("active", "held", "archived")
ARCHIVABLE = ("active", "held")
RESTORABLE = ("archived",)


def check_status(row: Any, memory_id: int, action: str, allowed: tuple[str, ...]) -> None:
    if row["status"] not in allowed:
        raise InvalidInput(f"cannot {action} memory {memory_id}: it is {row['status']}")


def check_confirm(row: Any, memory_id: int, now: str, profile: str | None = None) -> None:
    """Only a current, unexpired fact can be confirmed; anything else is told what to do."""
    if row["kind"] != "fact":
        raise InvalidInput(
            f"memory {memory_id} is a {row['kind']}: only a fact can be confirmed"
            " (pin it to keep it)"
        )
    if row["status"] != "active":
        fix = {
            "held": "accept it from the review inbox instead",
            "superseded": f"confirm the version that replaced it (#{row['superseded_by']})"
            if row["superseded_by"]
            else "confirm its current version",
            "archived": "restore it first",
        }[row["status"]]
        raise InvalidInput(f"cannot confirm memory {memory_id}: it is {row['status']}; {fix}")
    if row["expires_at"] and row["expires_at"] <= now:
        raise InvalidInput(
            f"memory {memory_id} expired at {row['expires_at']}: give it a new expiry"
            f" first (navi memory edit {memory_id} --expires 7d{profile_flag(profile)}, or never)"
        )


class StateOps:
    async def _archive_by_system(
        self: Store, memory_id: int, old_status: str, reason: str, **details: Any
    ) -> None:
        """Archive a memory the user did not touch (a limit, an expiry), saying why in its
        history (inside a transaction)."""
        await self.db.execute(
            "UPDATE memories SET status = 'archived', updated_at = ? WHERE id = ?",
            (now_iso(), memory_id),
        )
        await self._history(
            memory_id,
            "archive",
            "system",
            old={"status": old_status},
            new={"status": "archived", "reason": reason, **details},
        )

    async def _set_state(
        self: Store,
        memory_id: int,
        action: str,
        actor: str,
        sql: str,
        allowed: tuple[str, ...],
    ) -> Memory:
        async with self.db.transaction():
            row = await self._row(memory_id)
            check_status(row, memory_id, action, allowed)
            await self.db.execute(
                f"UPDATE memories SET {sql}, updated_at = ? WHERE id = ?", (now_iso(), memory_id)
            )
            new = await self._row(memory_id)
            await self._history(
                memory_id,
                action,
                actor,
                old={"status": row["status"], "pinned": row["pinned"]},
                new={"status": new["status"], "pinned": new["pinned"]},
            )
            if row["status"] != new["status"]:
                await self._mark_profile_stale()
            return Memory.from_row(new)

    async def pin(self: Store, memory_id: int, pinned: bool = True, actor: str = "user") -> Memory:
        """A pinned memory never decays and is never pruned."""
        return await self._set_state(
            memory_id,
            "pin" if pinned else "unpin",
            actor,
            f"pinned = {int(pinned)}, strength = 1.0",
            PINNABLE,
        )

    async def archive(self: Store, memory_id: int, actor: str = "user") -> Memory:
        return await self._set_state(memory_id, "archive", actor, "status = 'archived'", ARCHIVABLE)

    async def restore(self: Store, memory_id: int, actor: str = "user") -> Memory:
        return await self._set_state(
            memory_id, "restore", actor, "status = 'active', strength = 1.0", RESTORABLE
        )

    async def accept(self: Store, memory_id: int, actor: str = "user") -> Memory:
        """A held candidate reviewed and kept: it becomes the current value for its key."""
        async with self.db.transaction():
            row = await self._row(memory_id)
            check_status(row, memory_id, "accept", ("held",))
            await self.db.execute(
                "UPDATE memories SET status = 'active', review_reason = NULL, updated_at = ?"
                " WHERE id = ?",
                (now_iso(), memory_id),
            )
            await self._history(
                memory_id, "accept", actor, old={"status": "held"}, new={"status": "active"}
            )
            await self._supersede_others(row)
            await self._mark_profile_stale()
        return await self.get(memory_id)

    async def _supersede_others(self: Store, row: Any) -> None:
        """One current value per key: ``row`` (just made active) replaces any other."""
        if not row["norm_key"]:
            return
        others = await self.db.fetchall(
            "SELECT id FROM memories WHERE kind = ? AND norm_key = ? AND status = 'active'"
            " AND id != ? ORDER BY id",
            (row["kind"], row["norm_key"], row["id"]),
        )
        for other in others:
            await self._supersede(other["id"], row["id"], "extraction")

    async def confirm(self: Store, memory_id: int, actor: str = "user") -> Memory:
        """The user says a fact is still true: pinned (it never fades), full confidence, and
        ``last_verified_at`` now. Its expiry, if any, stays: the user set or stated it."""
        async with self.db.transaction():
            row = await self._row(memory_id)
            now = now_iso()
            check_confirm(row, memory_id, now, self.profile)
            await self.db.execute(
                "UPDATE memories SET pinned = 1, strength = 1.0, confidence = 1.0,"
                " last_verified_at = ?, updated_at = ? WHERE id = ?",
                (now, now, memory_id),
            )
            fields = ("pinned", "confidence", "last_verified_at")
            await self._history(
                memory_id,
                "confirm",
                actor,
                old={k: row[k] for k in fields},
                new={"pinned": 1, "confidence": 1.0, "last_verified_at": now},
            )
            return Memory.from_row(await self._row(memory_id))
