"""The daemon's ``chat.*`` methods, mixed into :class:`~navi_desktop.daemon.service.Service`:
a turn in a stored or an incognito session, one at a time per session, regenerate, cancel."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from navi_desktop.daemon import method_params as mp
from navi_desktop.daemon.chat import TurnResult, run_incognito_turn, run_turn
from navi_desktop.daemon.params import takes
from navi_desktop.daemon.wire import add_error_data
from navi_desktop.errors import InvalidInput
from navi_desktop.memory.backends import on_server
from navi_desktop.pipeline.context import ContextSettings
from navi_desktop.pipeline.incognito import IncognitoSession, memory_to_read

if TYPE_CHECKING:
    from navi_desktop.daemon.service import Service
    from navi_desktop.memory.store import MemoryStore


log = logging.getLogger(__name__)
MAX_INCOGNITO = 64  # incognito sessions kept at once (in memory only)


class ChatMethods:
    def incognito_session(self: Service, session_id: str) -> IncognitoSession | None:
        return self._incognito.get(session_id)

    def _new_incognito(self: Service) -> IncognitoSession:
        """A new incognito session. They live in the daemon's memory only, until discarded or
        kept; past MAX_INCOGNITO the least recently used one not answering goes (each `navi
        chat --incognito` leaves one, and a script of them grew the daemon without end)."""
        idle = [sid for sid in self._incognito if sid not in self._turns]
        for sid in idle[: max(0, len(self._incognito) + 1 - MAX_INCOGNITO)]:
            del self._incognito[sid]  # the oldest first: use moves a session to the end
            log.info("discarded incognito session %s (more than %d)", sid, MAX_INCOGNITO)
        session = IncognitoSession(read_memory=self.settings.incognito.read_memory)
        self._incognito[session.id] = session
        return session

    def _turn_args(self: Service, peer: Any) -> dict[str, Any]:
        """What every turn is given: the backend, the model, the memory budget, the caller."""
        return {
            "backend": self.backend(),
            "model": self.settings.ollama.chat_model,
            "emit": peer.notify,
            "context": ContextSettings(budget_tokens=self.settings.memory.budget_tokens),
            "reply_tokens": self.settings.ollama.reply_max_tokens,
        }

    async def _incognito_memory(
        self: Service, session: IncognitoSession, profile: str
    ) -> MemoryStore | None:
        """What an incognito turn may read (pipeline/incognito.py). A server profile is read
        where it is: reading it creates nothing."""
        if on_server(self.settings.memory):
            return await self.store(profile) if session.read_memory else None
        path = self.paths.profile_db(profile)
        return await memory_to_read(session, path, partial(self.store, profile))

    @takes(mp.ChatSend)
    async def chat_send(self: Service, params: mp.ChatSend, peer: Any) -> dict[str, Any]:
        """A turn. An error reply tells in ``data.stored`` whether the message was kept
        (``data.user_message_id``: its id in a stored session). The turn keeps it before it
        asks for the reply and tells so if that fails; a failure before it kept nothing: the
        client may give the words back to be sent again."""
        try:
            return await self._chat_send(params, peer)
        except Exception as exc:  # a cancel stays untold: it may come after the keeping
            add_error_data(exc, stored=False)  # unless the turn told it kept the message
            raise

    async def _chat_send(self: Service, params: mp.ChatSend, peer: Any) -> dict[str, Any]:
        text = params.text
        profile = self.profile(params.profile)
        session_id = params.session_id
        if params.incognito or session_id in self._incognito:
            session = self._incognito.pop(session_id, None) if session_id else None
            if session is None:
                session = self._new_incognito()
            self._incognito[session.id] = session  # the most recently used, last
            store = await self._incognito_memory(session, profile)
            turn = run_incognito_turn(
                session=session, store=store, text=text, **self._turn_args(peer)
            )
            return await self._incognito_turn(session.id, turn, peer)

        store = await self.store(profile)
        if session_id is None:
            session_id = (await store.create_session()).id
            for older in await store.sessions_to_process(include_open=True):
                if older.id != session_id:  # a new session ends the ones left unprocessed
                    self._spawn(self.end(profile, older.id, "new session"))
        else:
            await store.get_session(session_id)
        turn = partial(run_turn, text=text)
        return await self._stored_turn(profile, store, session_id, peer, turn)

    @takes(mp.ChatSession)
    async def chat_regenerate(self: Service, params: mp.ChatSession, peer: Any) -> dict[str, Any]:
        """Answer the session's last user message again, replacing the last reply."""
        session_id = params.session_id
        if (session := self._incognito.get(session_id)) is not None:
            store = await self._incognito_memory(session, self.profile(params.profile))
            args = self._turn_args(peer)

            async def incognito_turn() -> TurnResult:
                # Dropped inside the turn: a refused call (already answering) changes nothing.
                before = list(session.history)
                text = session.drop_last_turn()
                try:
                    return await run_incognito_turn(session=session, store=store, text=text, **args)
                except BaseException:
                    session.history[:] = before  # a failed answer leaves the old turn in place
                    raise

            return await self._incognito_turn(session_id, incognito_turn(), peer)

        profile = self.profile(params.profile)
        store = await self.store(profile)
        await store.get_session(session_id)

        async def turn(**args: Any) -> TurnResult:
            user = await store.drop_last_reply(session_id)
            return await run_turn(text=user.content, reuse_user=user, **args)

        return await self._stored_turn(profile, store, session_id, peer, turn)

    async def _incognito_turn(
        self, session_id: str, turn: Coroutine[Any, Any, TurnResult], peer: Any
    ) -> dict[str, Any]:
        result = await self._run(session_id, turn, peer)
        return result.to_dict() | {"incognito": True}

    async def _stored_turn(
        self,
        profile: str,
        store: MemoryStore,
        session_id: str,
        peer: Any,
        turn: Callable[..., Coroutine[Any, Any, TurnResult]],
    ) -> dict[str, Any]:
        """Run ``turn`` (``run_turn`` less its text) in a stored session, then restart the
        session's inactivity timer and tell subscribers what changed."""
        args = self._turn_args(peer)
        use_tools = await self._supports_tools(args["model"])
        try:
            result = await self._run(
                session_id,
                turn(store=store, session_id=session_id, use_tools=use_tools, **args),
                peer,
            )
        finally:
            self._touch(profile, session_id)
        if result.memory_changed:
            await self.broadcast(
                "memory", "memory.changed", {"profile": profile, "ids": result.memory_changed}
            )
        await self.broadcast(
            "sessions", "session.updated", {"profile": profile, "session_id": session_id}
        )
        # The turn went on without the memory server: said, so that no one thinks it is there.
        waiting = await self.remote.waiting(profile) if on_server(self.settings.memory) else None
        return result.to_dict() | {"incognito": False} | ({"waiting": waiting} if waiting else {})

    async def _supports_tools(self: Service, model: str) -> bool:
        try:
            return await self.backend().supports_tools(model)
        except Exception:  # the chat call itself reports what is wrong with the server
            return False

    async def _run(
        self: Service, session_id: str, turn: Coroutine[Any, Any, TurnResult], peer: Any
    ) -> TurnResult:
        """Run one turn as the session's only one. ``chat.cancel`` cancels it, and so does
        the caller closing its connection: the turn streams to it alone."""
        if session_id in self._turns:
            turn.close()  # never started: close it rather than leave it un-awaited
            raise InvalidInput(f"session {session_id} is already answering; cancel it first")
        task = asyncio.ensure_future(turn)
        self._turns[session_id] = task
        peer.stop_when_gone(task)
        try:
            with self.gate.turn():  # a session end's model request stands aside meanwhile
                return await task
        finally:
            self._turns.pop(session_id, None)

    @takes(mp.ChatSession)
    async def chat_cancel(self: Service, params: mp.ChatSession, peer: Any) -> dict[str, Any]:
        task = self._turns.get(params.session_id)
        if task is None:
            return {"cancelled": False}
        task.cancel()
        return {"cancelled": True}
