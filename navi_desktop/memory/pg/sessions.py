"""Session ends and embeddings on the server: the watermark, retries, what a session end
commits, and the vectors written later (the SQLite side's sessions.py and maintenance.py)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from navi_desktop.errors import InvalidInput
from navi_desktop.memory.clock import iso, now_iso
from navi_desktop.memory.documents import memory_text, message_text
from navi_desktop.memory.facts import NewMemory
from navi_desktop.memory.models import Memory, Message, Session
from navi_desktop.memory.sessions import MAX_ACTIVE_RULES, SessionCommit, SessionWrite

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore


class PgSessionOps:
    async def unprocessed_messages(self: PgMemoryStore, session_id: str) -> list[Message]:
        session = await self.get_session(session_id)
        return await self.messages(session_id, after_id=session.processed_upto)

    async def _end_processing(self: PgMemoryStore, session_id: str, upto: int) -> int:
        from navi_desktop.memory.pg.db import rowcount

        return rowcount(
            await self.db.execute(
                "UPDATE sessions SET processed_upto = greatest(processed_upto, $1), state = CASE"
                " WHEN EXISTS (SELECT 1 FROM messages WHERE session_id = sessions.id AND id > $1)"
                " THEN 'open' ELSE 'ended' END, ended_at = $2, pending_reason = NULL,"
                " attempts = 0, next_attempt_at = NULL WHERE id = $3",
                (upto, now_iso(), session_id),
            )
        )

    async def mark_processed(self: PgMemoryStore, session_id: str, upto_message_id: int) -> None:
        async with self.db.transaction():
            if not await self._end_processing(session_id, upto_message_id):
                raise InvalidInput(f"no session with id {session_id!r}")

    async def commit_session(
        self: PgMemoryStore,
        session_id: str,
        upto_message_id: int,
        writes: list[SessionWrite],
        summary: str | None,
        *,
        first_message_id: int | None = None,
        max_rules: int = MAX_ACTIVE_RULES,
    ) -> SessionCommit:
        """Everything a session end learned, in one transaction with the watermark. The row
        lock on the session makes a second daemon's commit of the same end wait, then see
        the watermark moved and commit nothing twice."""
        result = SessionCommit()
        for w in writes:
            w.memory.check()
        async with self.db.transaction():
            done_upto = await self.db.scalar(
                "SELECT processed_upto FROM sessions WHERE id = $1 FOR UPDATE", (session_id,)
            )
            if done_upto is None:
                raise InvalidInput(f"no session with id {session_id!r}")
            if done_upto >= upto_message_id:
                return result  # processed by another daemon meanwhile
            for w in writes:
                if w.action == "hold":
                    new_id = await self._insert(w.memory, "extraction")
                    result.ids.setdefault("held", []).append(new_id)
                    continue
                if w.action == "strengthen" and w.target_id is not None:
                    done = await self._strengthen(
                        await self._row(w.target_id), w.memory.confidence, "extraction"
                    )
                else:
                    done = await self._upsert(w.memory, "extraction")
                if done.memory is not None:
                    result.ids.setdefault(done.action, []).append(done.memory.id)
            if summary:
                result.summary_id = await self._insert(
                    NewMemory(
                        value=summary,
                        kind="episode",
                        source="conversation",
                        session_id=session_id,
                        message_from=first_message_id,
                        message_to=upto_message_id,
                    ),
                    "extraction",
                )
            for row in await self.db.fetchall(
                "SELECT id FROM memories WHERE kind = 'rule' AND status = 'active'"
                " ORDER BY updated_at DESC, id DESC OFFSET $1",
                (max_rules,),
            ):
                await self.db.execute(
                    "UPDATE memories SET status = 'archived', updated_at = $2 WHERE id = $1",
                    (row["id"], now_iso()),
                )
                await self._history(
                    row["id"],
                    "archive",
                    "system",
                    old={"status": "active"},
                    new={"status": "archived", "reason": "rule limit"},
                )
                result.archived_rules.append(row["id"])
            await self._end_processing(session_id, upto_message_id)
        return result

    async def mark_pending(
        self: PgMemoryStore,
        session_id: str,
        reason: str,
        *,
        base_delay_s: float = 60.0,
        max_delay_s: float = 6 * 3600.0,
    ) -> Session:
        async with self.db.transaction():
            attempts = await self.db.scalar(
                "SELECT attempts FROM sessions WHERE id = $1 FOR UPDATE", (session_id,)
            )
            if attempts is None:
                raise InvalidInput(f"no session with id {session_id!r}")
            delay = min(max_delay_s, base_delay_s * 2**attempts)
            await self.db.execute(
                "UPDATE sessions SET state = 'pending', pending_reason = $1,"
                " attempts = attempts + 1, next_attempt_at = $2 WHERE id = $3",
                (reason[:500], iso(datetime.now(UTC) + timedelta(seconds=delay)), session_id),
            )
        return await self.get_session(session_id)

    async def sessions_to_process(
        self: PgMemoryStore, *, idle_before: str | None = None, include_open: bool = False
    ) -> list[Session]:
        from navi_desktop.memory.pg.store import _SESSION_COLUMNS

        async with self.db.reading():
            rows = await self.db.fetchall(
                f"SELECT {_SESSION_COLUMNS} FROM sessions s WHERE EXISTS (SELECT 1 FROM"
                " messages m WHERE m.session_id = s.id AND m.id > s.processed_upto) AND ("
                " (s.state = 'pending' AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= $1))"
                " OR (s.state != 'pending' AND ($2 OR s.last_active_at <= $3)))"
                " ORDER BY s.last_active_at",
                (now_iso(), include_open, idle_before or ""),
            )
        return [Session.from_row(r) for r in rows]

    async def latest_summary(
        self: PgMemoryStore, *, exclude_session: str | None = None
    ) -> Memory | None:
        from navi_desktop.memory.pg.facts import MEMORY_COLUMNS

        async with self.db.reading():
            row = await self.db.fetchone(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE kind = 'episode'"
                " AND status = 'active' AND session_id IS DISTINCT FROM $1"
                " ORDER BY created_at DESC, id DESC LIMIT 1",
                (exclude_session,),
            )
        return Memory.from_row(row) if row else None

    async def active_rules(self: PgMemoryStore) -> list[Memory]:
        memories, _ = await self.list_memories(kind="rule", sort="created", limit=1000)
        return memories

    async def profile_summary(self: PgMemoryStore) -> tuple[str | None, bool]:
        async with self.db.reading():
            rows = dict(
                await self.db.fetchall(
                    "SELECT key, value FROM meta WHERE key IN"
                    " ('profile_summary', 'profile_summary_stale')"
                )
            )
        return rows.get("profile_summary"), rows.get("profile_summary_stale") == "1"

    async def set_profile_summary(self: PgMemoryStore, text: str) -> None:
        async with self.db.transaction():
            await self._set_meta("profile_summary", text)
            await self._set_meta("profile_summary_stale", None)

    async def rename_session(self: PgMemoryStore, session_id: str, title: str) -> Session:
        from navi_desktop.memory.pg.db import rowcount

        title = title.strip()
        if not title:
            raise InvalidInput("a session title cannot be empty")
        async with self.db.transaction():
            changed = await self.db.execute(
                "UPDATE sessions SET title = $1 WHERE id = $2", (title[:200], session_id)
            )
            if not rowcount(changed):
                raise InvalidInput(f"no session with id {session_id!r}")
        return await self.get_session(session_id)

    # -- embeddings --------------------------------------------------------------------------

    async def backfill_embeddings(
        self: PgMemoryStore, *, batch: int = 32, limit: int | None = None, messages: bool = True
    ) -> int:
        """Embed what has no vector for the current model (memories first, then messages unless
        ``messages`` is false); when nothing is left, drop vectors of earlier models. Returns
        how many texts were embedded."""
        if self.embedder is None:
            return 0
        from navi_desktop.memory.pg.facts import MEMORY_COLUMNS
        from navi_desktop.memory.pg.store import _MESSAGE_COLUMNS

        model, done = self.embedder.model, 0
        targets = [
            (
                "memory_id",
                "memories",
                MEMORY_COLUMNS,
                memory_text,
                "status IN ('active', 'held') AND",
            ),
        ]
        if messages:
            targets.append(("message_id", "messages", _MESSAGE_COLUMNS, message_text, ""))
        for column, table, columns, render, where in targets:
            while limit is None or done < limit:
                size = batch if limit is None else min(batch, limit - done)
                async with self.db.reading():
                    rows = await self.db.fetchall(
                        f"SELECT {columns} FROM {table} t WHERE {where} NOT EXISTS (SELECT 1"
                        f" FROM embeddings e WHERE e.{column} = t.id AND e.model = $1)"
                        " ORDER BY id LIMIT $2",
                        (model, size),
                    )
                if not rows:
                    break
                texts = [render(r) for r in rows]
                vectors = np.asarray(await self.embedder.embed(texts, query=False), np.float32)
                async with self.db.transaction():
                    # a row changed or gone while we embedded keeps no stale vector
                    now = await self.db.fetchall(
                        f"SELECT {columns} FROM {table} WHERE id = ANY($1::bigint[])",
                        ([r["id"] for r in rows],),
                    )
                    current = {r["id"]: render(r) for r in now}
                    await self.db.executemany(
                        f"INSERT INTO embeddings ({column}, model, dim, content_hash, vector,"
                        " created_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                        [
                            (r["id"], model, int(vec.shape[0]), _digest(text), vec, now_iso())
                            for r, text, vec in zip(rows, texts, vectors, strict=True)
                            if current.get(r["id"]) == text
                        ],
                    )
                done += len(rows)
        if await self.missing_embeddings() == 0:  # every text has the current model's vector
            async with self.db.transaction():
                await self.db.execute("DELETE FROM embeddings WHERE model != $1", (model,))
        return done


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
