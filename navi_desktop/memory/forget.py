"""Forgetting for real: a memory and every trace of it leave the file; a tombstone stays."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.textproc import keyed_hash, normalize, normalize_key

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore

log = logging.getLogger(__name__)


@dataclass
class ForgetReport:
    forgotten: list[int] = field(default_factory=list)
    redacted_messages: int = 0


class ForgetOps:
    # -- tombstones ----------------------------------------------------------------------------

    async def _tomb_key(self: MemoryStore) -> bytes:
        return bytes.fromhex(
            await self.db.scalar("SELECT value FROM meta WHERE key = 'tombstone_key'")
        )

    async def _tomb_hashes(self: MemoryStore, kind: str, norm_key: str | None, value: str):
        secret = await self._tomb_key()
        value_hash = keyed_hash(secret, f"{kind}\x1f{value}")
        fact_hash = (
            keyed_hash(secret, f"{kind}\x1f{norm_key}\x1f{value}") if norm_key else value_hash
        )
        return fact_hash, value_hash

    async def _tombstoned(self: MemoryStore, kind: str, norm_key: str | None, value: str) -> bool:
        fact_hash, value_hash = await self._tomb_hashes(kind, norm_key, value)
        return bool(
            await self.db.scalar(
                "SELECT 1 FROM tombstones WHERE fact_hash = ? OR value_hash = ?",
                (fact_hash, value_hash),
            )
        )

    async def is_forgotten(
        self: MemoryStore,
        value: str,
        *,
        subject: str | None = None,
        key: str | None = None,
        kind: str = "fact",
    ) -> bool:
        """Whether this memory was forgotten before (extraction must not bring it back)."""
        norm_key = normalize_key(subject, key) if key else None
        async with self.db.reading():
            return await self._tombstoned(kind, norm_key, value)

    # -- forget --------------------------------------------------------------------------------

    async def forget(self: MemoryStore, memory_id: int, actor: str = "user") -> ForgetReport:
        """Remove a memory and every trace: its earlier versions, history, index terms, vectors,
        entity links, ledger rows and its evidence quote in the source messages. A keyed hash
        (a tombstone) stops extraction from bringing it back; the file keeps no copy of the text.
        """
        report = ForgetReport()
        async with self.db.transaction():
            # The versions this one replaced are the same memory (each once, even if an
            # imported file linked them in a loop).
            rows = [await self._row(memory_id), *await self._older_versions(memory_id)]
            chain = list({r["id"]: r for r in rows}.values())
            summary = await self.db.scalar("SELECT value FROM meta WHERE key = 'profile_summary'")
            for row in chain:
                fact_hash, value_hash = await self._tomb_hashes(
                    row["kind"], row["norm_key"], row["value"]
                )
                await self.db.execute(
                    "INSERT OR IGNORE INTO tombstones (fact_hash, value_hash, kind, created_at)"
                    " VALUES (?, ?, ?, ?)",
                    (fact_hash, value_hash, row["kind"], now_iso()),
                )
                report.redacted_messages += await self._redact_evidence(row)
                await self._unindex_memory(row["id"])
                if summary and normalize(row["value"]) in normalize(summary):
                    summary = None
                    await self._set_meta("profile_summary", None)
            ids = [r["id"] for r in chain]
            marks = ",".join("?" * len(ids))
            await self.db.execute(
                f"UPDATE memories SET superseded_by = NULL WHERE superseded_by IN ({marks})", ids
            )
            await self.db.execute(f"DELETE FROM memories WHERE id IN ({marks})", ids)
            await self._drop_orphan_entities()
            await self._mark_profile_stale()
            report.forgotten = ids
        await self._purge_free_space(messages=report.redacted_messages > 0)
        return report

    async def _redact_evidence(self: MemoryStore, row: Any) -> int:
        quote = (row["evidence"] or "").strip()
        if len(quote) < 4 or not row["session_id"]:
            return 0
        hits = await self.db.fetchall(
            "SELECT id, content FROM messages WHERE session_id = ? AND instr(content, ?) > 0",
            (row["session_id"], quote),
        )
        for hit in hits:
            await self.db.execute(
                "UPDATE messages SET content = replace(content, ?, '[forgotten]') WHERE id = ?",
                (quote, hit["id"]),
            )
            await self._reindex_message(hit["id"])
            following = await self.db.scalar(
                "SELECT id FROM messages WHERE session_id = ? AND id > ? ORDER BY id LIMIT 1",
                (row["session_id"], hit["id"]),
            )
            if following is not None:  # its index carries this one as context
                await self._reindex_message(following)
        await self.db.execute(  # a title can quote what was said, too
            "UPDATE sessions SET title = replace(title, ?, '[forgotten]')"
            " WHERE id = ? AND instr(title, ?) > 0",
            (quote, row["session_id"], quote),
        )
        return len(hits)

    async def _purge_free_space(self: MemoryStore, *, messages: bool) -> None:
        """Merge the full-text index so deleted terms leave its pages (secure_delete zeroes the
        freed ones), then fold the WAL into the file and truncate it."""
        async with self.db.transaction():
            await self.db.execute("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')")
            if messages:
                await self.db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")
        async with self.db.reading():
            # TRUNCATE waits (busy_timeout) for searches still reading older frames; should
            # one outlast that, the log keeps the text until the next checkpoint.
            if await self.db.scalar("PRAGMA wal_checkpoint(TRUNCATE)"):
                log.warning("the log was in use: forgotten text stays in it until a checkpoint")
