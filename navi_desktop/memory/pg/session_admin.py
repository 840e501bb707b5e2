"""Deleting, trimming and exporting whole sessions on the server (the SQLite side's
SessionAdminOps, sessions.py; renaming is in pg/sessions.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from navi_desktop.errors import InvalidInput
from navi_desktop.memory.models import Message
from navi_desktop.memory.sessions import session_markdown

if TYPE_CHECKING:
    from navi_desktop.memory.pg.store import PgMemoryStore


class PgSessionAdminOps:
    async def delete_session(self: PgMemoryStore, session_id: str) -> int:
        """Delete a session and its messages (memories learned from it stay, unlinked; their
        vectors, entity links and ledger rows go by cascade). Returns how many messages went."""
        async with self.db.transaction():
            count = await self.db.scalar(
                "SELECT count(*) FROM messages WHERE session_id = $1", (session_id,)
            )
            gone = await self.db.execute("DELETE FROM sessions WHERE id = $1", (session_id,))
            if not gone:
                raise InvalidInput(f"no session with id {session_id!r}")
            await self._drop_orphan_entities()
        return int(count)

    async def drop_last_reply(self: PgMemoryStore, session_id: str) -> Message:
        """Delete everything after the session's last user message (the reply, tool calls and
        results) and that turn's ledger rows, so the message can be answered again."""
        from navi_desktop.memory.pg.store import _MESSAGE_COLUMNS

        await self.get_session(session_id)  # NotFound for an unknown id
        async with self.db.transaction():
            row = await self.db.fetchone(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_id = $1"
                " AND role = 'user' ORDER BY id DESC LIMIT 1",
                (session_id,),
            )
            if row is None:
                raise InvalidInput(f"session {session_id!r} has no message to answer again")
            gone = await self.db.execute(
                "DELETE FROM messages WHERE session_id = $1 AND id > $2", (session_id, row["id"])
            )
            if gone:
                await self._drop_orphan_entities()
            # The new answer records what it was given; the old ledger described the old reply.
            await self.db.execute("DELETE FROM injections WHERE message_id = $1", (row["id"],))
            # Identity values are never reused here, but the watermark must not pass the user
            # message either way: the session end would skip the new reply.
            await self.db.execute(
                "UPDATE sessions SET processed_upto = least(processed_upto, $1) WHERE id = $2",
                (row["id"], session_id),
            )
        return Message.from_row(row)

    async def export_session(self: PgMemoryStore, session_id: str) -> str:
        """The session as Markdown: title, date, then each message under its speaker."""
        session = await self.get_session(session_id)
        return session_markdown(session, await self.messages(session_id))
