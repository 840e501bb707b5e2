"""Session bookkeeping for the session-end seam: watermarks, pending state, summaries."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.memory.clock import check_iso, iso, now_iso
from navi_desktop.memory.facts import MEMORY_COLUMNS, NewMemory
from navi_desktop.memory.models import Memory, Message, Session

if TYPE_CHECKING:
    from navi_desktop.memory.backends import Store


MAX_ACTIVE_RULES = 20
SESSION_COLUMNS = (
    "id, title, created_at, last_active_at, state, processed_upto, pending_reason, ended_at"
)
MESSAGE_COLUMNS = "id, session_id, role, name, content, created_at, meta"
# What the user said first in ``sessions``' row: an untitled session is named by it.
FIRST_SAID = (
    "(SELECT substr(m.content, 1, 120) FROM messages m"
    " WHERE m.session_id = sessions.id AND m.role = 'user' ORDER BY m.id LIMIT 1)"
)


@dataclass(frozen=True)
class SessionWrite:
    """One reconciled candidate: ``add`` (or supersede by key), ``strengthen`` an existing
    memory, or ``hold`` it for review without touching what is current."""

    action: str
    memory: NewMemory
    target_id: int | None = None


@dataclass
class SessionCommit:
    ids: dict[str, list[int]] = field(default_factory=dict)
    summary_id: int | None = None
    archived_rules: list[int] = field(default_factory=list)

    @property
    def facts_changed(self) -> bool:
        return any(self.ids.get(k) for k in ("added", "superseded", "promoted"))


class SessionOps:
    async def commit_session(
        self: Store,
        session_id: str,
        upto_message_id: int,
        writes: list[SessionWrite],
        summary: str | None,
        *,
        first_message_id: int | None = None,
        max_rules: int = MAX_ACTIVE_RULES,
    ) -> SessionCommit:
        """Everything a session end learned, in one transaction with the watermark: a crash
        leaves either all of it or none (and the session is processed again)."""
        result = SessionCommit()
        for w in writes:
            w.memory.check()
        async with self.db.transaction():
            done_upto = await self.db.scalar(
                f"SELECT processed_upto FROM sessions WHERE id = ?{self.ROW_LOCK}", (session_id,)
            )
            if done_upto is None:
                raise NotFound(f"no session with id {session_id!r}")
            # An end already committed (another daemon, a retry) moved the watermark; a chunk
            # that moves none (0: one long message goes on in the next chunk) always commits.
            if upto_message_id and done_upto >= upto_message_id:
                return result
            for w in writes:
                if w.action == "strengthen" and w.target_id is not None:
                    row = await self._row(w.target_id)
                    done = await self._strengthen(row, w.memory.confidence, "extraction")
                    if row["status"] == "held" and done.memory and done.memory.status == "active":
                        # A candidate that waited for a repetition is now current: it replaces
                        # the value it contradicted, and the profile is rewritten.
                        result.ids.setdefault("promoted", []).append(done.memory.id)
                        await self._supersede_others(row)
                elif w.action == "hold":
                    new_id = await self._insert(w.memory, "extraction")
                    result.ids.setdefault("held", []).append(new_id)
                    continue
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
            result.archived_rules = await self._cap_rules(max_rules)
            await self._end_processing(session_id, upto_message_id)
        return result

    async def _cap_rules(self: Store, max_rules: int) -> list[int]:
        """Keep at most ``max_rules`` active rules: the oldest are archived, never dropped."""
        rules = await self.db.fetchall(
            "SELECT id FROM memories WHERE kind = 'rule' AND status = 'active'"
            " ORDER BY updated_at DESC, id DESC"
        )
        rows = rules[max_rules:]
        for row in rows:
            await self._archive_by_system(row["id"], "active", "rule limit")
        return [r["id"] for r in rows]

    async def unprocessed_messages(self: Store, session_id: str) -> list[Message]:
        """Messages after the session's watermark: what the next session-end must process."""
        session = await self.get_session(session_id)
        return await self.messages(session_id, after_id=session.processed_upto)

    async def mark_processed(self: Store, session_id: str, upto_message_id: int) -> None:
        """Move the watermark and end the session (a later message reopens it)."""
        async with self.db.transaction():
            if not await self._end_processing(session_id, upto_message_id):
                raise NotFound(f"no session with id {session_id!r}")

    async def _end_processing(self: Store, session_id: str, upto_message_id: int) -> int:
        """Move the watermark, clear the retry state and end the session, unless messages came
        after the watermark (then it stays open). Returns 0 for an unknown session."""
        return await self.db.execute(
            "UPDATE sessions SET processed_upto = CASE WHEN processed_upto > ?1"
            " THEN processed_upto ELSE ?1 END, state = CASE"
            " WHEN EXISTS (SELECT 1 FROM messages WHERE session_id = sessions.id AND id > ?1)"
            " THEN 'open' ELSE 'ended' END, ended_at = ?, pending_reason = NULL,"
            " attempts = 0, next_attempt_at = NULL WHERE id = ?",
            (upto_message_id, now_iso(), session_id),
        )

    async def mark_pending(
        self: Store,
        session_id: str,
        reason: str,
        *,
        base_delay_s: float = 60.0,
        max_delay_s: float = 6 * 3600.0,
    ) -> Session:
        """Processing failed: keep the session pending with its reason, retry with backoff."""
        async with self.db.transaction():
            attempts = await self.db.scalar(
                f"SELECT attempts FROM sessions WHERE id = ?{self.ROW_LOCK}", (session_id,)
            )
            if attempts is None:
                raise NotFound(f"no session with id {session_id!r}")
            delay = min(max_delay_s, base_delay_s * 2**attempts)
            retry = iso(datetime.now(UTC) + timedelta(seconds=delay))
            await self.db.execute(
                "UPDATE sessions SET state = 'pending', pending_reason = ?,"
                " attempts = attempts + 1, next_attempt_at = ? WHERE id = ?",
                (reason[:500], retry, session_id),
            )
        return await self.get_session(session_id)

    async def sessions_to_process(
        self: Store, *, idle_before: str | None = None, include_open: bool = False
    ) -> list[Session]:
        """Sessions with unprocessed messages that are due: pending ones whose retry time has
        come, and open ones idle since ``idle_before`` (or every open one with ``include_open``)."""
        now = now_iso()
        async with self.db.reading():
            rows = await self.db.fetchall(
                f"SELECT {SESSION_COLUMNS} FROM sessions s WHERE EXISTS (SELECT 1 FROM messages m"
                " WHERE m.session_id = s.id AND m.id > s.processed_upto) AND ("
                " (s.state = 'pending' AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= ?))"
                " OR (s.state != 'pending' AND (? OR s.last_active_at <= ?)))"
                " ORDER BY s.last_active_at",
                (now, include_open, idle_before or ""),
            )
        return [Session.from_row(r) for r in rows]

    async def pending_status(self: Store, open_ids: Sequence[str] = ()) -> tuple[int, str | None]:
        """How many sessions wait to be processed, and the most recent reason: those pending a
        retry, and those with unprocessed messages that are not ``open_ids`` (still going):
        an end that failed before even "pending" could be saved (a full disk) left its
        session open, which was counted as neither open nor waiting."""
        others = f" AND s.id NOT IN ({', '.join('?' * len(open_ids))})" if open_ids else ""
        async with self.db.reading():
            row = await self.db.fetchone(
                "SELECT count(*), (SELECT pending_reason FROM sessions WHERE state = 'pending'"
                " ORDER BY last_active_at DESC LIMIT 1) FROM sessions s WHERE (s.state ="
                " 'pending' OR EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id"
                f" AND m.id > s.processed_upto)){others}",
                list(open_ids),
            )
        return int(row[0]), row[1]

    async def latest_summary(self: Store, *, exclude_session: str | None = None) -> Memory | None:
        async with self.db.reading():
            row = await self.db.fetchone(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE kind = 'episode'"
                " AND status = 'active' AND session_id IS DISTINCT FROM ?"
                " ORDER BY created_at DESC, id DESC LIMIT 1",
                (exclude_session,),
            )
        return Memory.from_row(row) if row else None

    async def active_rules(self: Store) -> list[Memory]:
        memories, _ = await self.list_memories(kind="rule", sort="created", limit=1000)
        return memories

    async def profile_summary(self: Store) -> tuple[str | None, bool]:
        """The narrative summary of the user, and whether facts changed since it was written."""
        async with self.db.reading():
            rows = dict(
                await self.db.fetchall(
                    "SELECT key, value FROM meta WHERE key IN"
                    " ('profile_summary', 'profile_summary_stale')"
                )
            )
        return rows.get("profile_summary"), rows.get("profile_summary_stale") == "1"

    async def set_profile_summary(self: Store, text: str) -> None:
        async with self.db.transaction():
            await self._set_meta("profile_summary", text)
            await self._set_meta("profile_summary_stale", "0")


class SessionAdminOps:
    """Whole sessions: creating, reading, listing, renaming, deleting and exporting them."""

    async def create_session(
        self: Store,
        title: str | None = None,
        *,
        session_id: str | None = None,
        at: str | None = None,
    ) -> Session:
        sid = session_id or uuid.uuid4().hex[:12]
        when = check_iso(at, "at") if at else now_iso()
        async with self.db.transaction():
            if not await self.db.execute(
                "INSERT INTO sessions (id, title, created_at, last_active_at)"
                " VALUES (?1, ?2, ?3, ?3) ON CONFLICT DO NOTHING",
                (sid, title, when),
            ):
                raise InvalidInput(f"session {sid!r} already exists")
        return await self.get_session(sid)

    async def get_session(self: Store, session_id: str) -> Session:
        async with self.db.reading():
            row = await self.db.fetchone(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
            )
        if row is None:
            raise NotFound(f"no session with id {session_id!r}")
        return Session.from_row(row)

    async def list_sessions(self: Store, *, limit: int = 100, offset: int = 0) -> list[Session]:
        async with self.db.reading():
            rows = await self.db.fetchall(
                f"SELECT {SESSION_COLUMNS}, {FIRST_SAID} AS preview"
                " FROM sessions ORDER BY last_active_at DESC LIMIT ? OFFSET ?",
                (limit, offset),
            )
        return [Session.from_row(r) for r in rows]

    async def rename_session(self: Store, session_id: str, title: str) -> Session:
        title = title.strip()
        if not title:
            raise InvalidInput("a session title cannot be empty")
        async with self.db.transaction():
            if not await self.db.execute(
                "UPDATE sessions SET title = ? WHERE id = ?", (title[:200], session_id)
            ):
                raise NotFound(f"no session with id {session_id!r}")
        return await self.get_session(session_id)

    async def delete_session(self: Store, session_id: str) -> int:
        """Delete a session and its messages (memories learned from it stay, unlinked).
        Returns how many messages went.

        Gone as a forget is gone: saved with the delete is a note that its text is still to
        leave the file's free space, its log and the profile's copies (backups, a file a
        restore kept aside), which ``_session_deleted`` then carries out; a stop in between
        leaves the note for the retries."""
        async with self.db.transaction():
            ids = [
                r[0]
                for r in await self.db.fetchall(
                    "SELECT id FROM messages WHERE session_id = ?", (session_id,)
                )
            ]
            await self._unindex_messages(ids)
            if not await self.db.execute("DELETE FROM sessions WHERE id = ?", (session_id,)):
                raise NotFound(f"no session with id {session_id!r}")
            await self._drop_orphan_entities()
            await self._note_session_deleted(session_id)
        await self._session_deleted(session_id)
        return len(ids)

    async def drop_last_reply(self: Store, session_id: str) -> Message:
        """Delete everything after the session's last user message (the reply, and tool calls
        and results), with its index entries and that turn's ledger rows, so the message can be
        answered again. Returns the user message."""
        await self.get_session(session_id)  # NotFound for an unknown id
        async with self.db.transaction():
            row = await self.db.fetchone(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND role = 'user'"
                " ORDER BY id DESC LIMIT 1",
                (session_id,),
            )
            if row is None:
                raise InvalidInput(f"session {session_id!r} has no message to answer again")
            ids = [
                r[0]
                for r in await self.db.fetchall(
                    "SELECT id FROM messages WHERE session_id = ? AND id > ?",
                    (session_id, row["id"]),
                )
            ]
            await self._unindex_messages(ids)
            if ids:
                await self.db.execute(
                    "DELETE FROM messages WHERE session_id = ? AND id > ?", (session_id, row["id"])
                )
                await self._drop_orphan_entities()
            # The new answer records what it was given; the old ledger described the old reply.
            await self.db.execute("DELETE FROM injections WHERE message_id = ?", (row["id"],))
            # Message ids can be reused once the newest rows are gone: a watermark past the user
            # message would count the new reply as processed, and the session end would skip it.
            await self.db.execute(
                "UPDATE sessions SET processed_upto = CASE WHEN processed_upto > ?1 THEN ?1"
                " ELSE processed_upto END WHERE id = ?2",
                (row["id"], session_id),
            )
        return Message.from_row(row)

    async def export_session(self: Store, session_id: str) -> str:
        """The session as Markdown: title, date, then each message under its speaker."""
        session = await self.get_session(session_id)
        return session_markdown(session, await self.messages(session_id))


def session_markdown(session: Session, messages: list[Message]) -> str:
    """A session for reading: title, date, then each message under its speaker."""
    lines = [f"# {session.title or 'Chat'}", "", f"Started {session.created_at[:16]}Z.", ""]
    for m in messages:
        if m.role == "tool":
            lines += [f"**Tool result ({m.name or 'tool'})**", "", "```", m.content, "```", ""]
        else:
            lines += [
                f"**{m.name or m.role.capitalize()}** · {m.created_at[11:16]}",
                "",
                m.content,
                "",
            ]
    return "\n".join(lines)
