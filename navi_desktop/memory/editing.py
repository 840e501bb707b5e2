"""Changes to one memory made by hand: correct it (a new version replaces it, which stays in
history), or edit it in place (a typo, a better category, when it expires)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from navi_desktop.errors import InvalidInput
from navi_desktop.expiry import check_expires_at
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.facts import EDITABLE, NewMemory
from navi_desktop.memory.models import Memory
from navi_desktop.memory.textproc import normalize, normalize_key

if TYPE_CHECKING:
    from navi_desktop.memory.backends import Store


def correction(old: Any, memory_id: int, value: str, evidence: str | None) -> NewMemory:
    """The new version that corrects ``old`` (a memory row) to ``value``; ``InvalidInput``
    when ``old`` is not current or already says it."""
    if old["status"] not in ("active", "held"):
        raise InvalidInput(
            f"memory {memory_id} is {old['status']}; only a current one can be corrected"
        )
    if normalize(old["value"]) == normalize(value):
        raise InvalidInput(f"memory {memory_id} already has that value")
    item = NewMemory(
        value=value,
        kind=old["kind"],
        category=old["category"],
        subject=old["subject"],
        key=old["key"],
        evidence=evidence,
        source="user_explicit",
        session_id=old["session_id"],
        pinned=bool(old["pinned"]),
        # a new value for a fact that holds until then holds until then too
        expires_at=old["expires_at"] if (old["expires_at"] or "") > now_iso() else None,
    )
    item.check()
    return item


def check_edit(changes: dict[str, Any]) -> dict[str, Any]:
    """The fields an edit may change, an expiry in its stored form (None: never)."""
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise InvalidInput(
            f"cannot edit {', '.join(sorted(unknown))}; editable: " + ", ".join(EDITABLE)
        )
    if changes.get("expires_at") is not None:
        return changes | {"expires_at": check_expires_at(changes["expires_at"])}
    return changes


def plan_edit(
    row: Any, memory_id: int, changes: dict[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """What an edit of ``row`` changes (field → new value; empty: nothing) and the memory's
    key afterwards; ``InvalidInput`` for a replaced memory or a value it may not take."""
    if row["status"] == "superseded":
        raise InvalidInput(
            f"memory {memory_id} was replaced by #{row['superseded_by']}; edit that one"
        )
    merged = {k: row[k] for k in EDITABLE} | changes
    merged["value"] = str(merged["value"]).strip()
    NewMemory(kind=row["kind"], source=row["source"], **merged).check()
    changed = {k: merged[k] for k in changes if row[k] != merged[k]}
    norm_key = normalize_key(merged["subject"], merged["key"]) if merged["key"] else None
    return changed, norm_key


def check_clash(clash: int | None, norm_key: str) -> None:
    """``clash``: another current memory that already holds the key an edit would give."""
    if clash:
        raise InvalidInput(f"memory #{clash} already holds {norm_key}: correct or forget that one")


class EditOps:
    async def correct(
        self: Store,
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

    async def edit(self: Store, memory_id: int, *, actor: str = "user", **changes: Any) -> Memory:
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
                    "SELECT id FROM memories WHERE norm_key = ? AND kind = ? AND id != ?"
                    " AND status IN ('active', 'held') LIMIT 1",
                    (norm_key, row["kind"], memory_id),
                )
                check_clash(clash, norm_key)
            sets = ", ".join(f"{k} = ?" for k in changed)
            await self.db.execute(
                f"UPDATE memories SET {sets}, norm_key = ?, updated_at = ? WHERE id = ?",
                (*changed.values(), norm_key, now_iso(), memory_id),
            )
            if set(changed) - {"expires_at"}:  # the text changed: so do its index entries
                await self._unindex_memory(memory_id)
                await self._index_memory(await self._row(memory_id))
            await self._history(
                memory_id,
                "edit",
                actor,
                old={k: row[k] for k in changed},
                new=changed,
            )
            await self._mark_profile_stale()
            return Memory.from_row(await self._row(memory_id))
