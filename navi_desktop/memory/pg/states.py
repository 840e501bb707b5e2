"""Memory states on the server: accept, archive, confirm, restore, correct, edit, strengthen. The
rules (which status may change to which, what a correction writes) are the SQLite side's
(states.py, editing.py); the statements are PostgreSQL's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.editing import check_clash, check_edit, correction, plan_edit
from navi_desktop.memory.facts import WriteResult
from navi_desktop.memory.models import Memory
from navi_desktop.memory.states import ARCHIVABLE, RESTORABLE, check_confirm, check_status

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore


class PgStateOps:
    async def _archive_by_system(
        self: PgMemoryStore, memory_id: int, old_status: str, reason: str, **details: Any
    ) -> None:
        """Archive a memory the user did not touch (a limit, an expiry), saying why in its
        history (inside a transaction)."""
        await self.db.execute(
            "UPDATE memories SET status = 'archived', updated_at = $1 WHERE id = $2",
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
        self: PgMemoryStore,
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
                f"UPDATE memories SET {sql}, updated_at = $1 WHERE id = $2", (now_iso(), memory_id)
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

    async def archive(self: PgMemoryStore, memory_id: int, actor: str = "user") -> Memory:
        return await self._set_state(memory_id, "archive", actor, "status = 'archived'", ARCHIVABLE)

    async def restore(self: PgMemoryStore, memory_id: int, actor: str = "user") -> Memory:
        return await self._set_state(
            memory_id, "restore", actor, "status = 'active', strength = 1.0", RESTORABLE
        )

    async def accept(self: PgMemoryStore, memory_id: int, actor: str = "user") -> Memory:
        """A held candidate reviewed and kept: it becomes the current value for its key."""
        async with self.db.transaction():
            row = await self._row(memory_id)
            check_status(row, memory_id, "accept", ("held",))
            await self.db.execute(
                "UPDATE memories SET status = 'active', review_reason = NULL, updated_at = $1"
                " WHERE id = $2",
                (now_iso(), memory_id),
            )
            await self._history(
                memory_id, "accept", actor, old={"status": "held"}, new={"status": "active"}
            )
            await self._supersede_others(row)
            await self._mark_profile_stale()
        return await self.get(memory_id)

    async def _supersede_others(self: PgMemoryStore, row: Any) -> None:
        """One current value per key: ``row`` (just made active) replaces any other."""
        if not row["norm_key"]:
            return
        others = await self.db.fetchall(
            "SELECT id FROM memories WHERE kind = $1 AND norm_key = $2 AND status = 'active'"
            " AND id != $3 ORDER BY id",
            (row["kind"], row["norm_key"], row["id"]),
        )
        for other in others:
            await self._supersede(other["id"], row["id"], "extraction")

    async def confirm(self: PgMemoryStore, memory_id: int, actor: str = "user") -> Memory:
        """The user says a fact is still true: pinned, full confidence, verified now."""
        async with self.db.transaction():
            row = await self._row(memory_id)
            now = now_iso()
            check_confirm(row, memory_id, now)
            await self.db.execute(
                "UPDATE memories SET pinned = 1, strength = 1.0, confidence = 1.0,"
                " last_verified_at = $1, updated_at = $1 WHERE id = $2",
                (now, memory_id),
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

    async def correct(
        self: PgMemoryStore,
        memory_id: int,
        value: str,
        *,
        evidence: str | None = None,
        actor: str = "user",
    ) -> Memory:
        """The world changed: a new version replaces this one, which stays in history."""
        async with self.db.transaction():
            item = correction(await self._row(memory_id), memory_id, value, evidence)
            new_id = await self._insert(item, actor)
            await self._supersede(memory_id, new_id, actor)
            return Memory.from_row(await self._row(new_id))

    async def edit(
        self: PgMemoryStore, memory_id: int, *, actor: str = "user", **changes: Any
    ) -> Memory:
        """Fix a memory in place (a typo, a better category, when it expires: None for never);
        the old values go to history."""
        changes = check_edit(changes)
        async with self.db.transaction():
            row = await self._row(memory_id)
            changed, norm_key = plan_edit(row, memory_id, changes)
            if not changed:
                return Memory.from_row(row)
            if norm_key and norm_key != row["norm_key"]:
                clash = await self.db.scalar(
                    "SELECT id FROM memories WHERE norm_key = $1 AND kind = $2 AND id != $3"
                    " AND status IN ('active', 'held') LIMIT 1",
                    (norm_key, row["kind"], memory_id),
                )
                check_clash(clash, norm_key)
            sets = ", ".join(f"{k} = ${n}" for n, k in enumerate(changed, start=4))
            await self.db.execute(
                f"UPDATE memories SET {sets}, norm_key = $1, updated_at = $2 WHERE id = $3",
                (norm_key, now_iso(), memory_id, *changed.values()),
            )
            if set(changed) - {"expires_at"}:  # the text changed: so do its index entries
                await self.db.execute("DELETE FROM embeddings WHERE memory_id = $1", (memory_id,))
                await self._index_memory(await self._row(memory_id))
            await self._history(
                memory_id, "edit", actor, old={k: row[k] for k in changed}, new=changed
            )
            await self._mark_profile_stale()
            return Memory.from_row(await self._row(memory_id))

    async def strengthen(
        self: PgMemoryStore,
        memory_id: int,
        *,
        confidence: float = 0.0,
        actor: str = "extraction",
    ) -> WriteResult:
        async with self.db.transaction():
            return await self._strengthen(await self._row(memory_id), confidence, actor)
