"""The chat: sessions beside the transcript, a streamed reply at a time, and incognito.

A reply runs as an exclusive worker that awaits ``chat.send``; its tokens arrive meanwhile
as ``chat.delta`` notifications and go into the reply's Markdown stream. Sessions are created
before the first message, so Esc can always name the session to cancel.
"""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Label

from navi_desktop.daemon.client import RemoteNotFound
from navi_desktop.tui.base import NaviScreen
from navi_desktop.tui.chat.actions import SessionActions
from navi_desktop.tui.chat.incognito import IncognitoActions
from navi_desktop.tui.chat.messages import MessageView, Transcript
from navi_desktop.tui.chat.notices import STOPPED, UNSURE, reply_note
from navi_desktop.tui.chat.prompt import Prompt
from navi_desktop.tui.chat.rate import RatingActions
from navi_desktop.tui.chat.sessions import SessionsPane, short

NEEDS_SESSION = {"rename_session", "delete_session", "export_session", "end_session"}


class ChatScreen(IncognitoActions, RatingActions, SessionActions, NaviScreen):
    DEFAULT_CSS = """
    ChatScreen #main { height: 1fr; }
    ChatScreen #chat { width: 1fr; }
    ChatScreen #chat-title { width: 1fr; padding: 0 1; background: $panel; text-style: bold; }
    ChatScreen.-incognito #chat-title { background: $error; color: $text; }
    ChatScreen #transcript { height: 1fr; padding: 1 1 0 1; }
    ChatScreen.-incognito #transcript { background: $error 8%; }
    ChatScreen.-incognito Prompt { border: round $error; }
    ChatScreen.-narrow SessionsPane { display: none; }
    ChatScreen.-narrow.-show-sessions SessionsPane { display: block; }
    ChatScreen.-hide-sessions SessionsPane { display: none; }
    """
    # Below 100 columns the sessions list hides itself (Ctrl+B shows it).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    # F-keys have Alt alternatives (some terminals swallow F-keys). None is a priority
    # binding: those run ahead of keys typed before them.
    BINDINGS = [
        Binding("escape", "cancel", "Stop reply", id="navi.chat.cancel"),
        Binding("ctrl+n", "new_session", "New session", id="navi.chat.new"),
        Binding("ctrl+b", "toggle_sessions", "Sessions", id="navi.chat.sessions"),
        Binding("ctrl+r", "regenerate", "Regenerate", id="navi.chat.regenerate", show=False),
        Binding("alt+o", "switch_model", "Switch chat model", id="navi.chat.model", show=False),
        Binding("f5,alt+u", "used", "What did you use?", id="navi.chat.used"),
        Binding("f6,alt+y", "copy_reply", "Copy reply", id="navi.chat.copy", show=False),
        Binding("f11,alt+v", "rate_reply", "Rate reply", id="navi.chat.rate", show=False),
        Binding(
            "ctrl+f", "search_sessions", "Search sessions", id="navi.sessions.search", show=False
        ),
        Binding(
            "f7,alt+r", "rename_session", "Rename session", id="navi.sessions.rename", show=False
        ),
        Binding(
            "f8,alt+d", "delete_session", "Delete session", id="navi.sessions.delete", show=False
        ),
        Binding(
            "f9,alt+e", "export_session", "Export session", id="navi.sessions.export", show=False
        ),
        Binding(
            "f10,alt+l",
            "end_session",
            "Learn from session now",
            id="navi.sessions.end",
            show=False,
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.session_id: str | None = None
        self.incognito = False
        self.reply: MessageView | None = None  # the reply being streamed
        # A turn from Enter to its reply's end. Set before the worker starts, so a second
        # Enter (or R) in the awaits before the reply exists cannot start a turn that would
        # cancel this one (the reply worker is exclusive) and lose its message.
        self.answering = False
        self._stopping = False  # Esc was pressed during this reply
        self._heard = False  # a word of this reply came: the daemon kept its message
        self._unlisted = False  # a new session the sessions list does not show yet
        self._deleting: str | None = None  # the session F8 deleted (not "elsewhere")

    # -- layout --------------------------------------------------------------------------------

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="main"):
            yield SessionsPane(id="sessions-pane")
            with Vertical(id="chat"):
                yield Label("New chat", id="chat-title", markup=False)  # words as typed
                yield Transcript(id="transcript")
                yield Prompt(id="prompt")

    @property
    def transcript(self) -> VerticalScroll:
        return self.query_one("#transcript", VerticalScroll)

    @property
    def prompt(self) -> Prompt:
        # By id: a query by type walks the transcript (every block of every reply) before it.
        return self.query_one("#prompt", Prompt)

    @property
    def sessions(self) -> SessionsPane:
        return self.query_one(SessionsPane)

    def on_mount(self) -> None:
        self.prompt.focus()
        if self.navi.start_incognito:
            self._set_incognito(True)
        self._show_title()
        self.sessions.reload()

    async def on_daemon(self, method: str, params: Any) -> None:
        if method == "chat.delta" and self.reply is not None:
            if isinstance(params, dict) and params.get("session_id") == self.session_id:
                self._heard = True
                if self._unlisted:  # its first message is stored now: the list can name it
                    self._unlisted = False
                    self.sessions.reload()
                await self.reply.write(str(params.get("text", "")))
        elif method in ("session.updated", "session.state") or (
            method == "link.state" and params.state == "up"
        ):
            self.sessions.reload()
            if method == "session.state":
                self._ended_by_daemon(params)
            elif method == "session.updated" and self._deleted_elsewhere(params):
                await self._session_gone(params["session_id"])
        elif method == "memory.changed" and (params or {}).get("method") == "memory.forget":
            # Forgetting redacts what was said: the list and the open transcript follow.
            self.sessions.reload()
            if self.session_id and not self.incognito and not self.answering:
                self._reopen(self.session_id)

    def _show_title(self) -> None:
        if self.incognito:
            text = "INCOGNITO · nothing from this chat is saved"
        else:
            text = self.sessions.title_of(self.session_id) or "New chat"
        self.query_one("#chat-title", Label).update(text)

    def _views(self) -> list[MessageView]:
        # The transcript's children only: a query of all its descendants walked every block
        # of every reply, for each key the footer checks (~200 ms after a few long replies).
        return list(self.transcript.query_children(MessageView))

    def _last_reply(self) -> MessageView | None:
        views = self._views()
        return views[-1] if views and views[-1].role == "assistant" else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel":
            return self.reply is not None
        if action == "regenerate":  # a message left without a reply (a crash) is answered too
            return not self.answering and bool(self._views())
        if action in ("used", "copy_reply"):
            return self._last_reply() is not None
        if action == "rate_reply":
            return not self.answering and self._last_reply() is not None
        if action in NEEDS_SESSION:
            return self.session_id is not None and not self.incognito
        return True

    # -- sending -------------------------------------------------------------------------------

    @on(Prompt.Submitted)
    def _submitted(self, event: Prompt.Submitted) -> None:
        if self.answering:
            self._give_back(event.text)
            self.notify(
                "Navi is still answering: your message is back in the prompt; send it when"
                " the reply ends, or stop the reply with Esc",
                severity="warning",
            )
            return
        self.answering = True
        self.send(event.text)

    def _give_back(self, text: str) -> None:
        """Put words that were not sent back in the prompt, before anything typed since."""
        prompt = self.prompt
        prompt.text = f"{text}\n{prompt.text}" if prompt.text.strip() else text
        prompt.move_cursor(prompt.document.end)

    @work(exclusive=True, group="reply", exit_on_error=False)
    async def send(self, text: str | None, regenerate: bool = False) -> None:
        """Send ``text`` (or regenerate the last reply) and stream the answer. The caller set
        ``answering``; it is cleared when the turn ends, however it ends."""
        try:
            await self._turn(text, regenerate)
        finally:
            self.answering = False
            self.refresh_bindings()

    async def _turn(self, text: str | None, regenerate: bool) -> None:
        link = self.navi.link
        try:
            if self.session_id is None:
                created = await link.call("sessions.create", {"incognito": self.incognito})
                self.session_id = created["id"]
                if not self.incognito:
                    self.sessions.current = self.session_id
                    self._unlisted = True
                    self.query_one("#chat-title", Label).update(short(text) or "New chat")
        except Exception as err:
            self.navi.report(err, "Starting a session")
            if text:
                self._give_back(text)  # not sent: give the words back instead of losing them
            return
        said = MessageView("user", text) if text is not None else None
        if said is not None:
            await self._add(said)
        reply = MessageView("assistant")
        await self._add(reply)
        await reply.begin_stream()
        self.reply = reply
        self._heard = False
        self.refresh_bindings()
        method = "chat.regenerate" if regenerate else "chat.send"
        params: dict[str, Any] = {"session_id": self.session_id}
        if text is not None:
            params["text"] = text
        try:
            result = await link.call(method, params)
        except Exception as err:
            kept, turn_id = self._kept(err)
            if isinstance(err, RemoteNotFound):  # the session was deleted elsewhere meanwhile
                await self._session_gone(params["session_id"], text)
            elif said and text and kept is False:
                # Never kept (a full disk, no connection): shown as sent, it was lost, and
                # Ctrl+R then answered the turn before under it.
                await reply.remove()
                await said.remove()
                self._give_back(text)
                self.navi.report(err, "Sending (your message is back in the prompt)")
            elif self._stopping:  # stopped before the first token: not an error
                await reply.finish(reply.text, user_message_id=turn_id, note=STOPPED)
            elif kept is None and said and not self.incognito:
                # Not known (the daemon went away before the reply began): kept on screen,
                # marked. Given back, a message the daemon did keep is sent and kept twice,
                # and the first copy is gone from the screen; kept here, one it did not keep
                # is still there to copy and send again.
                await reply.finish(reply.text, note=f"⚠ {err} ({UNSURE})")
                self.navi.report(err, "The reply")
            else:
                await reply.finish(reply.text, user_message_id=turn_id, note=f"⚠ {err}")
                self.navi.report(err, "The reply")
        else:
            if self.navi.status.missing_models:  # it answered: the model may be there now
                self.navi.check_models()
            await reply.finish(
                result.get("reply", ""),
                user_message_id=result.get("user_message_id"),
                injected=result.get("injected"),
                note=reply_note(result),
            )
        finally:
            self.reply = None  # only now: until the view is finished, F5 and R have no turn
            self._stopping = False
            if self._unlisted:  # no reply came, but the message is stored
                self._unlisted = False
                self.sessions.reload()
            self.refresh_bindings()
            self.transcript.scroll_end(animate=False)

    async def _add(self, view: MessageView) -> None:
        await self.transcript.mount(view)
        self.transcript.scroll_end(animate=False)
        self.transcript.anchor()

    async def action_cancel(self) -> None:
        if self.reply is None or self.session_id is None:
            return
        self._stopping = True
        try:
            await self.navi.link.call("chat.cancel", {"session_id": self.session_id})
        except Exception as err:
            self.navi.report(err, "Stopping the reply")

    async def action_regenerate(self) -> None:
        if not self.check_action("regenerate", ()):
            return
        last = self._last_reply()  # None: the last message has no reply yet
        self.answering = True
        try:
            if last is not None:
                await last.remove()
        finally:
            self.send(None, regenerate=True)

    def action_copy_reply(self) -> None:
        if (last := self._last_reply()) is not None:
            last.action_copy()

    def action_used(self) -> None:
        if (last := self._last_reply()) is not None:
            last.action_used()

    @on(MessageView.UsedRequested)
    def _show_used(self, event: MessageView.UsedRequested) -> None:
        if event.view.user_message_id is not None:
            from navi_desktop.tui.chat.used import UsedScreen  # with its first use

            self.app.push_screen(UsedScreen(event.view.user_message_id))

    # -- sessions ------------------------------------------------------------------------------

    def action_focus_main(self) -> None:
        self.prompt.focus()

    @property
    def sessions_shown(self) -> bool:
        if self.has_class("-narrow"):
            return self.has_class("-show-sessions")
        return not self.has_class("-hide-sessions")

    def show_sessions(self, shown: bool) -> None:
        narrow = self.has_class("-narrow")
        self.set_class(shown and narrow, "-show-sessions")
        self.set_class(not shown and not narrow, "-hide-sessions")
        if not shown and self.sessions.has_focus_within:
            self.prompt.focus()

    def action_toggle_sessions(self) -> None:
        self.show_sessions(not self.sessions_shown)
        if self.sessions_shown:
            self.query_one("#sessions").focus()

    def action_search_sessions(self) -> None:
        self.show_sessions(True)
        self.query_one("#session-search").focus()

    @on(SessionsPane.Loaded)
    def _titles_loaded(self) -> None:
        self._show_title()  # the open session may have been renamed elsewhere

    @on(SessionsPane.Picked)
    async def _picked(self, event: SessionsPane.Picked) -> None:
        await self.action_open_session(event.session_id)
        if self.has_class("-narrow"):  # the list was over the chat: make room again
            self.show_sessions(False)

    def _wait_for_reply(self) -> bool:
        """True (and said) while a turn runs: a session or mode change waits for its end."""
        if self.answering:
            self.notify("Wait for the reply, or stop it with Esc", severity="warning")
        return self.answering

    async def action_open_session(self, session_id: str) -> None:
        if self._wait_for_reply():
            return
        if self.incognito and not await self._leave_incognito():
            return
        try:
            shown = await self.navi.link.call("sessions.show", {"id": session_id})
        except Exception as err:
            self.navi.report(err, "Opening the session")
            return
        self.session_id = session_id
        self.sessions.current = session_id
        await self._show_messages(shown.get("messages", []))
        await self._show_ratings(session_id)
        self._show_title()
        self.refresh_bindings()
        self.prompt.focus()

    @work(exclusive=True, group="reopen", exit_on_error=False)
    async def _reopen(self, session_id: str) -> None:
        try:
            shown = await self.navi.link.call("sessions.show", {"id": session_id})
        except Exception:  # deleted meanwhile: nothing left to redraw
            return
        if self.session_id == session_id and not self.answering:
            await self._show_messages(shown.get("messages", []))
            await self._show_ratings(session_id)

    async def _show_messages(self, messages: list[dict[str, Any]]) -> None:
        views: list[MessageView] = []
        user_id: int | None = None
        for m in messages:
            if m["role"] == "user":
                user_id = m["id"]
                views.append(MessageView("user", m["content"]))
            elif m["role"] == "assistant" and m["content"]:
                views.append(
                    MessageView(
                        "assistant",
                        m["content"],
                        user_message_id=user_id,
                        note=reply_note(m.get("meta") or {}),
                    )
                )
        await self.transcript.remove_children()
        await self.transcript.mount_all(views)
        self.transcript.scroll_end(animate=False)
        self.transcript.anchor()

    async def _clear(self) -> None:
        await self.transcript.remove_children()
        self.session_id = None
        self.sessions.current = None
        self._show_title()
        self.refresh_bindings()

    @work(exclusive=True, group="session-action", exit_on_error=False)
    async def action_new_session(self) -> None:
        if self._wait_for_reply():
            return
        previous = None if self.incognito else self.session_id
        if self.incognito:
            if not await self._leave_incognito():
                return
            self._set_incognito(True)  # a new chat stays incognito: only Ctrl+O leaves it
        await self._clear()
        self.prompt.focus()
        if previous is not None and self._listed(previous):
            self._end(previous, quiet=True)

    def _listed(self, session_id: str) -> bool:
        return any(s["id"] == session_id for s in self.sessions.sessions)
