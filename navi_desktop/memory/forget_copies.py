"""A forget carried into the other copies of the profile Navi keeps: its backups, and a file
a restore kept aside (``memory.before-restore-*.db``). A restore must not bring the text back.

The copies are scrubbed after the forget is saved. A daemon stopped in between (a crash, a
kill, a power cut) left them holding the text, with nothing to say so; so the forget saves,
with itself, which memory ids and scope the copies still owe. The record holds ids, never
text: a retry finds the text in each copy's own rows of those ids.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import DiskError, DiskFull, InvalidInput, NaviError
from navi_desktop.memory.clock import now_iso
from navi_desktop.memory.db import DbError
from navi_desktop.memory.scrub import UNFINISHED

if TYPE_CHECKING:
    from navi_desktop.memory.forget import ForgetReport
    from navi_desktop.memory.matching import Matcher
    from navi_desktop.memory.store import MemoryStore

log = logging.getLogger(__name__)
COPIES_KEY = "pending_copy_scrubs"
Needles = tuple["Matcher", set[str]]
NeedlesFor = Callable[[list[Any], str], Needles]  # a copy's rows -> their needles


class CopyScrubOps:
    is_copy = False  # a backup opened to carry a forget or a delete into it: it has no copies

    async def _copies_pending(self: MemoryStore) -> list[dict[str, Any]]:
        raw = await self.db.scalar("SELECT value FROM meta WHERE key = ?", (COPIES_KEY,))
        return json.loads(raw) if raw else []

    async def _note_copies_pending(self: MemoryStore, ids: list[int], scope: str) -> None:
        """Inside the forget's transaction: the copies owe this forget until done."""
        pending = [p for p in await self._copies_pending() if p.get("ids") != ids]
        pending.append({"ids": ids, "scope": scope, "since": now_iso()})
        await self._set_meta(COPIES_KEY, json.dumps(pending))

    async def copy_scrubs_pending(self: MemoryStore) -> list[dict[str, Any]]:
        """Forgets not yet carried into the copies (a stop cut them short)."""
        async with self.db.reading():
            return await self._copies_pending()

    async def retry_copy_scrubs(self: MemoryStore) -> list[dict[str, Any]]:
        """Carry the forgets a stop cut short into the copies; the ones done."""
        from navi_desktop.memory.forget import ForgetReport

        done = []
        for pending in await self.copy_scrubs_pending():
            if "session" in pending:  # a deleted session
                await self._delete_in_copies(pending["session"])
                done.append(pending)
                continue
            report = ForgetReport(scope=pending["scope"])
            await self._scrub_copies(pending["ids"], report, None)
            log.info(
                "forget of %s carried into %d copies after a stop", pending["ids"], report.backups
            )
            done.append(pending)
        return done

    async def _scrub_copies(
        self: MemoryStore, ids: list[int], report: ForgetReport, needles: Needles | None
    ) -> None:
        """The forget of ``ids`` in every copy (``needles``: the forget's own matcher; None:
        each copy's rows of ``ids`` give theirs). A copy that cannot be opened is reported,
        and not tried again: the record is cleared once every copy was tried."""
        for path in await self._copies():
            try:
                await self._scrub_copy(path, ids, needles, report.scope)
                report.backups += 1
            except (NaviError, DbError, OSError) as exc:
                log.warning("backup %s not scrubbed: %s", path, exc)
                report.unscrubbed.append(f"{path}: {exc}")
        await self._clear_copy_note("ids", ids)

    async def _clear_copy_note(self: MemoryStore, field: str, value: Any) -> None:
        """The copies' note whose ``field`` (a forget's ``ids``, a delete's ``session``) is
        ``value`` is done. Notes of both kinds share the list: each is read by its own field."""
        try:
            async with self.db.transaction():
                left = [p for p in await self._copies_pending() if p.get(field) != value]
                await self._set_meta(COPIES_KEY, json.dumps(left) if left else None)
        except (DiskFull, DiskError) as exc:  # the change is saved: the note stays, and its
            log.warning("the copies' note kept for a retry: %s", exc)  # retry finds no more

    async def _copies(self: MemoryStore) -> list[Path]:
        """The profile's copies: its backups (damaged ones too: each is tried, and one that
        cannot be scrubbed is reported) and any file a restore kept aside. Only regular files:
        a link there is never followed (before, a forget rewrote the file it pointed to). The
        temporary copies a killed backup or restore left are removed first (backup.py)."""
        from navi_desktop.memory.backup import backup_files, remove_leftovers

        running = getattr(self.db, "_backup", None)  # a daily backup being made right now
        if running is not None:
            await running

        def copies() -> list[Path]:
            remove_leftovers(self.path)
            beside = [
                p for p in self.path.parent.glob("*.db") if p.name != self.path.name and _regular(p)
            ]
            return [*backup_files(self.path), *sorted(beside)]

        return await asyncio.to_thread(copies)

    # -- a deleted session ------------------------------------------------------------------

    async def _note_session_deleted(self: MemoryStore, session_id: str) -> None:
        """Inside the delete's transaction: the file's free space and the copies owe it."""
        await self._note_pending([], UNFINISHED)
        if self.is_copy:
            return
        pending = [p for p in await self._copies_pending() if p.get("session") != session_id]
        pending.append({"session": session_id, "since": now_iso()})
        await self._set_meta(COPIES_KEY, json.dumps(pending))

    async def _session_deleted(self: MemoryStore, session_id: str) -> None:
        """After a session's delete is saved: its text out of the file's free space and its
        log (or noted for the retries while a reader holds them), and out of every copy, so
        a restore cannot bring it back."""
        if why := await self._purge_free_space([]):
            log.warning("a deleted session stays in %s's free space: %s", self.path, why)
        if not self.is_copy:
            await self._delete_in_copies(session_id)

    async def _delete_in_copies(self: MemoryStore, session_id: str) -> None:
        for path in await self._copies():
            try:
                async with open_copy(path) as copy:
                    try:
                        await copy.delete_session(session_id)
                    except InvalidInput:  # made before the session, or after its delete,
                        # when the file's indexes still held its words (merged only after)
                        await copy._purge_free_space([])
            except (NaviError, DbError, OSError) as exc:
                log.warning("backup %s keeps a deleted session: %s", path, exc)
        await self._clear_copy_note("session", session_id)

    async def _scrub_copy(
        self: MemoryStore, path: Path, ids: list[int], needles: Needles | None, scope: str
    ) -> None:
        async with open_copy(path) as copy:
            owed = await copy._forget_in_copy(ids, needles or self._needles_for, scope)
            if owed and (why := await copy._purge_free_space(ids)):  # no retry of a backup
                raise NaviError(f"its old pages still hold it: {why}")

    async def _forget_in_copy(
        self: MemoryStore, ids: list[int], needles: Needles | NeedlesFor, scope: str
    ) -> bool:
        """In this copy: forget ``ids`` and redact; False when it owes nothing (a retry's
        copy made before the memory, or already scrubbed)."""
        async with self.db.transaction():
            marks = ",".join("?" * len(ids))
            rows = await self.db.fetchall(f"SELECT * FROM memories WHERE id IN ({marks})", ids)
            if callable(needles):
                if not rows:
                    return False
                needles = needles(rows, scope)
            await self._forget_rows(rows, *needles)
        return True


@asynccontextmanager
async def open_copy(path: Path) -> AsyncIterator[MemoryStore]:
    """A backup or a kept-aside copy, opened (so brought to this schema) to carry a forget or
    a delete into it, and left as a backup is made (no log beside it) once that is done."""
    from navi_desktop.memory.store import MemoryStore

    copy = await MemoryStore.open(path, create=False)
    copy.is_copy = True
    try:
        yield copy
        await copy.db.execute("PRAGMA journal_mode = DELETE")
    finally:
        await copy.close()


def _regular(path: Path) -> bool:
    """A regular file, not a link to one (a link is never followed out of the folder)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
