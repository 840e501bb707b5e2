"""What the user does to the open session besides chatting: rename, delete, export, learn
from it now (and hear what a session end learned and dropped), and switch the chat model.
Mixed into ``ChatScreen``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from textual import work
from textual.widgets import Label

from navi_desktop.daemon.client import RemoteNotFound, RpcCallError, message_kept
from navi_desktop.terminal_text import safe
from navi_desktop.tui.chat.notices import end_notice, worth_telling
from navi_desktop.tui.dialogs import ConfirmScreen, ask_text, confirmed
from navi_desktop.tui.export import export_to

if TYPE_CHECKING:
    from navi_desktop.tui.chat.screen import ChatScreen


class SessionActions:
    def _kept(self: ChatScreen, err: Exception) -> tuple[bool | None, int | None]:
        """Whether the daemon kept the message of a turn that failed with ``err``
        (``message_kept``), and its id when told."""
        told = err.data if isinstance(err, RpcCallError) else None
        turn_id = told.get("user_message_id") if isinstance(told, dict) else None
        return message_kept(err, heard=self._heard), turn_id if type(turn_id) is int else None

    @work(exclusive=True, group="session-action", exit_on_error=False)
    async def action_rename_session(self: ChatScreen) -> None:
        if self.session_id is None or self.incognito:
            return
        session_id = self.session_id
        current = self.sessions.title_of(session_id) or ""

        async def save(title: str) -> str:
            await self.navi.link.call("sessions.rename", {"id": session_id, "title": title})
            return title

        try:
            title = await ask_text(self.app, "Rename session", current, save)
        except RemoteNotFound:  # deleted elsewhere meanwhile
            await self._session_gone(session_id)
            return
        if title is None:
            return
        self.sessions.reload()
        self.query_one("#chat-title", Label).update(title)

    @work(exclusive=True, group="session-action", exit_on_error=False)
    async def action_delete_session(self: ChatScreen) -> None:
        if self.session_id is None or self.incognito:
            return
        title = self.sessions.title_of(self.session_id) or "this session"
        answer = await self.app.push_screen_wait(
            ConfirmScreen(
                "Delete this session?",
                f"{title}\n\nIts messages are deleted for good. Memories already learned from "
                "it stay; forget them in the inspector (F3).",
                yes="Delete",
            )
        )
        if not confirmed(answer) or self.session_id is None:
            return
        # Kept after the delete: the daemon's notice of it may come after the chat is cleared.
        self._deleting = self.session_id
        try:
            await self.navi.link.call("sessions.delete", {"id": self.session_id})
        except RemoteNotFound:
            pass  # deleted elsewhere meanwhile: what was wanted
        except Exception as err:
            self._deleting = None
            self.navi.report(err, "Deleting the session")
            return
        await self._clear()
        self.sessions.reload()
        self.notify("Session deleted")

    @work(exclusive=True, group="session-action", exit_on_error=False)
    async def action_export_session(self: ChatScreen) -> None:
        session_id = self.session_id
        if session_id is None or self.incognito:
            return
        title = self.sessions.title_of(session_id) or session_id

        async def markdown() -> str:
            reply = await self.navi.link.call("sessions.export", {"id": session_id})
            return str(reply["markdown"])

        try:
            path = await export_to(
                self.app, "this session", f"navi-session-{_slug(title)}.md", markdown
            )
        except RemoteNotFound:  # deleted elsewhere meanwhile
            await self._session_gone(session_id)
            return
        except Exception as err:
            self.navi.report(err, "Exporting the session")
            return
        if path is not None:
            self.notify(f"Exported to {safe(str(path))}")

    def _deleted_elsewhere(self: ChatScreen, params: Any) -> bool:
        """Whether a ``session.updated`` says the open session was deleted by another window
        or the command line (not by this screen's F8)."""
        return (
            isinstance(params, dict)
            and params.get("deleted") is True
            and params.get("profile") == self.navi.status.profile
            and params.get("session_id") == self.session_id
            and params.get("session_id") != self._deleting
            and not self.answering  # its turn fails on it and comes here itself
        )

    async def _session_gone(self: ChatScreen, session_id: str, text: str | None = None) -> None:
        """Session ``session_id`` no longer exists: if it is still the open one, the chat
        starts afresh rather than sending into it (each send failed, "no session with id
        ..."). ``text``, a message it did not take, goes back to the prompt."""
        if text:
            self._give_back(text)
        if session_id != self.session_id:
            return  # closed already (the daemon's notice of the delete came first)
        # An incognito chat is in the daemon's memory only: a restart or the cap lets it go.
        why = "the daemon no longer has it" if self.incognito else "it was deleted elsewhere"
        await self._clear()
        self.sessions.reload()
        then = "your message is back in the prompt: Enter" if text else "what you send next"
        self.notify(
            f"This chat is gone ({why}); {then} starts a new one.", severity="warning", timeout=10
        )

    @work(group="end", exit_on_error=False)
    async def _end(self: ChatScreen, session_id: str, quiet: bool = False) -> None:
        """Learn from a session now (the same path as the inactivity timeout)."""
        if not quiet:
            self.notify("Learning from this session…")
        try:
            reports = await self.navi.link.call("sessions.end", {"id": session_id})
        except Exception as err:
            self.navi.report(err, "Ending the session")
            return
        for report in reports:
            if report.get("status") == "pending":
                self.notify(
                    f"Not learned yet: {report.get('reason')}; Navi will retry.",
                    severity="warning",
                    markup=False,
                )
            elif worth_telling(report) or not quiet:
                self._tell_ended(report, "Session ended")

    def _ended_by_daemon(self: ChatScreen, params: Any) -> None:
        """A session end the daemon ran on its own (inactivity, a retry, recovery) says what
        it learned and dropped; one this screen asked for says so itself (``_end``)."""
        if not isinstance(params, dict) or params.get("trigger") in (None, "explicit"):
            return
        if params.get("profile") != self.navi.status.profile:
            return
        if params.get("state") == "processed" and worth_telling(params):
            title = self.sessions.title_of(params.get("session_id"))
            self._tell_ended(params, f"Session “{title}” ended" if title else "A session ended")

    def _tell_ended(self: ChatScreen, report: dict[str, Any], what: str) -> None:
        # Reasons may hold brackets: no markup. Longer when there are reasons to read.
        timeout = 12 if report.get("dropped") else 6
        self.notify(f"{what}: {end_notice(report)}", markup=False, timeout=timeout)

    def action_end_session(self: ChatScreen) -> None:
        if self.session_id is not None and not self.incognito:
            self._end(self.session_id)

    @work(exclusive=True, group="session-action", exit_on_error=False)
    async def action_switch_model(self: ChatScreen) -> None:
        from navi_desktop.tui.chat.models import ModelPicker  # with its first use

        try:
            reply = await self.navi.link.call("ollama.models")
        except Exception as err:
            self.navi.report(err, "Listing the models")
            return
        current = self.navi.settings.ollama.chat_model
        chosen = await self.app.push_screen_wait(ModelPicker(reply.get("models") or [], current))
        if chosen is None or chosen == current:
            return
        try:
            await self.navi.link.call("settings.set", {"changes": {"ollama.chat_model": chosen}})
        except Exception as err:
            self.navi.report(err, "Switching the model")
            return
        self.notify(f"Chat model: {chosen}, from the next message on")


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40] or "session"
