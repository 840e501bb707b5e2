"""Forgetting on the server: the memory, its earlier versions and every copy of its text
leave every table and index; keyed-hash tombstones stay (the SQLite side's rules, forget.py).

Afterwards the touched tables are VACUUMed so the dead rows' space is marked free. What a
server can still hold after that (free space until reused, WAL segments and archives, base
backups) is said in the README; ``compact`` (VACUUM FULL) rewrites the tables for an admin."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.documents import message_documents
from navi_desktop.memory.forget import (
    MAX_PHRASE_WORDS,
    SENTENCE,
    ForgetReport,
    _check_scope,
    _needles,
)
from navi_desktop.memory.matching import Matcher, needle_form, phrase_of, phrases
from navi_desktop.memory.textproc import entity_names, keyed_hash, normalize_key

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore

VACUUMED = ("memories", "memory_history", "messages", "embeddings", "entity_links", "entities")


class PgForgetOps:
    # -- tombstones ----------------------------------------------------------------------------

    async def _tomb_key(self: PgMemoryStore) -> bytes:
        return bytes.fromhex(
            await self.db.scalar("SELECT value FROM meta WHERE key = 'tombstone_key'")
        )

    async def _tomb_hashes(
        self: PgMemoryStore, kind: str, norm_key: str | None, value: str
    ) -> tuple[str, str]:
        secret = await self._tomb_key()
        value_hash = keyed_hash(secret, f"{kind}\x1f{value}")
        fact_hash = (
            keyed_hash(secret, f"{kind}\x1f{norm_key}\x1f{value}") if norm_key else value_hash
        )
        return fact_hash, value_hash

    async def _tombstoned(self: PgMemoryStore, kind: str, norm_key: str | None, value: str) -> bool:
        fact_hash, value_hash = await self._tomb_hashes(kind, norm_key, value)
        return bool(
            await self.db.scalar(
                "SELECT 1 FROM tombstones WHERE fact_hash = $1 OR value_hash = $2",
                fact_hash,
                value_hash,
            )
        )

    async def _forgotten_phrase(self: PgMemoryStore, texts: Iterable[str | None]) -> bool:
        lengths = [
            r[0] for r in await self.db.fetchall("SELECT DISTINCT words FROM forgotten_phrases")
        ]
        if not lengths:
            return False
        secret = await self._tomb_key()
        hashes = {
            keyed_hash(secret, f"phrase\x1f{p}") for t in texts if t for p in phrases(t, lengths)
        }
        return bool(hashes) and bool(
            await self.db.scalar(
                "SELECT 1 FROM forgotten_phrases WHERE hash = ANY($1::text[]) LIMIT 1",
                list(hashes),
            )
        )

    async def _lift_tombstones(
        self: PgMemoryStore, kind: str, norm_key: str | None, value: str
    ) -> None:
        fact_hash, value_hash = await self._tomb_hashes(kind, norm_key, value)
        await self.db.execute(
            "DELETE FROM tombstones WHERE fact_hash = $1 OR value_hash = $2", fact_hash, value_hash
        )
        secret = await self._tomb_key()
        await self.db.execute(
            "DELETE FROM forgotten_phrases WHERE hash = $1",
            keyed_hash(secret, f"phrase\x1f{phrase_of(value)}"),
        )

    async def is_forgotten(
        self: PgMemoryStore,
        value: str,
        *,
        subject: str | None = None,
        key: str | None = None,
        kind: str = "fact",
    ) -> bool:
        norm_key = normalize_key(subject, key) if key else None
        async with self.db.reading():
            return await self._tombstoned(kind, norm_key, value) or await self._forgotten_phrase(
                [value]
            )

    async def contains_forgotten(self: PgMemoryStore, texts: Iterable[str | None]) -> bool:
        async with self.db.reading():
            return await self._forgotten_phrase(list(texts))

    async def without_forgotten(self: PgMemoryStore, text: str | None) -> str | None:
        if not text:
            return text
        kept = [s for s in SENTENCE.split(text) if s.strip()]
        async with self.db.reading():
            kept = [s for s in kept if not await self._forgotten_phrase([s])]
        return " ".join(s.strip() for s in kept) or None

    # -- forget --------------------------------------------------------------------------------

    async def forget(
        self: PgMemoryStore, memory_id: int, actor: str = "user", *, scope: str = "everywhere"
    ) -> ForgetReport:
        """Remove a memory and every trace of it (see the module's docstring)."""
        _check_scope(scope)
        report = ForgetReport(scope=scope)
        async with self.db.transaction():
            chain = [await self._row(memory_id), *await self._older_versions(memory_id)]
            chain = list({r["id"]: r for r in chain}.values())
            matcher, same = _needles(chain, scope)
            also = await self._same_values(same, {r["id"] for r in chain})
            gone = [*chain, *also]
            for row in gone:
                fact_hash, value_hash = await self._tomb_hashes(
                    row["kind"], row["norm_key"], row["value"]
                )
                await self.db.execute(
                    "INSERT INTO tombstones (fact_hash, value_hash, kind, created_at)"
                    " VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    fact_hash,
                    value_hash,
                    row["kind"],
                    now_iso(),
                )
            await self._bury_phrases(matcher.needles)
            ids = [r["id"] for r in gone]
            # history, vectors, entity links and ledger rows go with the rows (cascade)
            await self.db.execute(
                "UPDATE memories SET superseded_by = NULL WHERE superseded_by = ANY($1::bigint[])",
                ids,
            )
            await self.db.execute("DELETE FROM memories WHERE id = ANY($1::bigint[])", ids)
            report.redacted_messages = await self._redact_messages(matcher)
            report.redacted_messages += await self._redact_memories(matcher)
            await self._drop_orphan_entities()
            await self._mark_profile_stale()
            report.forgotten = ids
        if report.redacted_messages:
            report.redacted = [f"{report.redacted_messages} messages or memories redacted"]
        await self.vacuum()
        return report

    async def _same_values(self: PgMemoryStore, same: set[str], chain: set[int]) -> list[Any]:
        """Other memories whose value is one of the forgotten values (scope everywhere)."""
        if not same:
            return []
        from navi_desktop.memory.pg.facts import MEMORY_COLUMNS

        rows = await self.db.fetchall(f"SELECT {MEMORY_COLUMNS} FROM memories")
        return [r for r in rows if r["id"] not in chain and needle_form(r["value"]) in same]

    async def _bury_phrases(self: PgMemoryStore, texts: Iterable[str]) -> None:
        secret = await self._tomb_key()
        rows = []
        for text in texts:
            phrase = phrase_of(text)
            words = len(phrase.split(" "))
            if phrase and words <= MAX_PHRASE_WORDS:
                rows.append((keyed_hash(secret, f"phrase\x1f{phrase}"), words, now_iso()))
        await self.db.executemany(
            "INSERT INTO forgotten_phrases (hash, words, created_at) VALUES ($1, $2, $3)"
            " ON CONFLICT DO NOTHING",
            rows,
        )

    async def _redact_messages(self: PgMemoryStore, matcher: Matcher) -> int:
        """Every message (content and metadata: tool calls and results) that contains the
        text is rewritten with the match replaced, and re-indexed."""
        if not matcher:
            return 0
        from navi_desktop.memory.pg.store import _MESSAGE_COLUMNS, tsv_sql

        changed = 0
        rows = await self.db.fetchall(f"SELECT {_MESSAGE_COLUMNS} FROM messages ORDER BY id")
        previous: dict[str, Any] = {}
        for row in rows:
            content, hits = matcher.redact(row["content"])
            meta, meta_hits = matcher.redact_json(row["meta"])
            before = previous.get(row["session_id"])
            previous[row["session_id"]] = {**row, "content": content}
            if not hits and not meta_hits and not (before and before.get("_redacted")):
                continue
            previous[row["session_id"]]["_redacted"] = bool(hits)
            draft = {**row, "content": content}
            body, context = message_documents(draft, before)
            await self.db.execute(
                f"UPDATE messages SET content = $2, meta = $3, tsv = {tsv_sql(4)} WHERE id = $1",
                row["id"],
                content,
                meta,
                body,
                context,
            )
            if hits or meta_hits:
                changed += 1
                await self.db.execute("DELETE FROM embeddings WHERE message_id = $1", row["id"])
                await self.db.execute("DELETE FROM entity_links WHERE message_id = $1", row["id"])
                await self._link_entities("message_id", row["id"], entity_names(content))
        return changed

    async def _redact_memories(self: PgMemoryStore, matcher: Matcher) -> int:
        """Other memories (summaries, reflections, facts) that quote the text keep the rest."""
        if not matcher:
            return 0
        from navi_desktop.memory.pg.facts import MEMORY_COLUMNS

        changed = 0
        for row in await self.db.fetchall(f"SELECT {MEMORY_COLUMNS} FROM memories"):
            value, hits = matcher.redact(row["value"])
            evidence, quote_hits = matcher.redact(row["evidence"])
            if not hits and not quote_hits:
                continue
            changed += 1
            await self.db.execute(
                "UPDATE memories SET value = $2, evidence = $3 WHERE id = $1",
                row["id"],
                value,
                evidence,
            )
            await self.db.execute("DELETE FROM memory_history WHERE memory_id = $1", row["id"])
            await self.db.execute("DELETE FROM embeddings WHERE memory_id = $1", row["id"])
            await self._index_memory(await self._row(row["id"]))
        return changed

    async def vacuum(self: PgMemoryStore, *, full: bool = False) -> None:
        """Mark the dead rows' space free (``full``: rewrite the tables, an admin's compact).
        VACUUM cannot run in a transaction: one statement per table on a pooled connection."""
        async with self.db.reading():
            for table in VACUUMED:
                await self.db.execute(f"VACUUM {'FULL ' if full else ''}{table}")


__all__ = ["SENTENCE", "PgForgetOps"]
