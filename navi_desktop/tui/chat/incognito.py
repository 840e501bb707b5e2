"""Incognito in the chat: entering clears the screen; leaving asks whether to discard the
conversation or keep it as a normal session. Mixed into ``ChatScreen``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work

from navi_desktop.tui.dialogs import ChoiceScreen

if TYPE_CHECKING:
    from navi_desktop.tui.chat.screen import ChatScreen


class IncognitoActions:
    def _set_incognito(self: ChatScreen, on: bool) -> None:
        self.incognito = on
        self.navi.set_status(incognito=on)
        self._show_title()
        self.refresh_bindings()

    @work(exclusive=True, group="session-action", exit_on_error=False)
    async def action_toggle_incognito(self: ChatScreen) -> None:
        if self._wait_for_reply():
            return
        if self.incognito:
            if await self._leave_incognito():
                if self.session_id is None:
                    await self._clear()
                else:  # kept: the transcript on screen is now that session's
                    self.sessions.current = self.session_id
                    self._show_title()
            return
        await self._clear()
        self._set_incognito(True)
        self.notify("Incognito: nothing from this chat is saved or learned")

    async def _leave_incognito(self: ChatScreen) -> bool:
        """Leave incognito: discard the transcript (after a confirm) or keep it as a session.
        Returns False when the user stays."""
        session_id = self.session_id
        if session_id is not None and self._views():
            answer = await self.app.push_screen_wait(
                ChoiceScreen(
                    "Leave incognito?",
                    "This conversation has not been saved. Discard it, or keep it as a "
                    "normal session (it will then be remembered)?",
                    [
                        ("stay", "Stay", "default"),
                        ("keep", "Keep as session", "primary"),
                        ("discard", "Discard", "error"),
                    ],
                )
            )
            if answer not in ("keep", "discard"):
                return False
            try:
                if answer == "keep":
                    kept = await self.navi.link.call("sessions.keep", {"id": session_id})
                    self._set_incognito(False)
                    self.sessions.reload()
                    self.session_id = kept["id"]
                    self.notify("Kept as a normal session")
                    return True
                await self.navi.link.call("sessions.delete", {"id": session_id})
            except Exception as err:
                self.navi.report(err, "Leaving incognito")
                return False
        self._set_incognito(False)
        self.session_id = None
        self.notify("Incognito off: this chat will be remembered")
        return True
