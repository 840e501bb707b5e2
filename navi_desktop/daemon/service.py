"""What the daemon does: the RPC methods over the memory engine, the pipeline and Ollama,
plus the session lifecycle (inactivity timers, the session-end seam, shutdown, recovery)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from navi_desktop.daemon import feedback_api, memory_api, memory_params, ollama_api, profiles
from navi_desktop.daemon import method_params as mp
from navi_desktop.daemon.background import IdleGate, SessionEnds, Throttle
from navi_desktop.daemon.chat import TurnResult, run_incognito_turn, run_turn
from navi_desktop.daemon.main import OLLAMA_CHECK_S
from navi_desktop.daemon.params import require_models, takes
from navi_desktop.daemon.profiles import ProfileErrors
from navi_desktop.errors import InvalidInput, NaviError, NotFound
from navi_desktop.memory.clock import iso
from navi_desktop.memory.store import MemoryStore
from navi_desktop.paths import Paths, check_profile_name
from navi_desktop.pipeline.context import ContextSettings
from navi_desktop.pipeline.forgetting import after_forget, finish_scrubs, scrub_logs
from navi_desktop.pipeline.incognito import IncognitoSession, memory_to_read
from navi_desktop.pipeline.session_end import EndReport, EndSettings, end_session

if TYPE_CHECKING:
    from navi_desktop.config import Settings
    from navi_desktop.llm.backend import OllamaBackend
    from navi_desktop.llm.types import Health

log = logging.getLogger(__name__)
Broadcast = Callable[[str, str, dict[str, Any]], Awaitable[object]]  # RpcServer.broadcast
Handler = Callable[[dict[str, Any], Any], Awaitable[Any]]
PROGRESS_EVERY_S = 1.0  # session-end progress notifications, at most this often


class Service:
    def __init__(self, paths: Paths, settings: Settings, broadcast: Broadcast) -> None:
        self.paths = paths
        self.settings = settings
        self.broadcast = broadcast
        self.started = time.monotonic()
        self._stores: dict[str, MemoryStore] = {}
        self._opening: dict[str, asyncio.Future[MemoryStore]] = {}
        self._backend: OllamaBackend | None = None
        self._timers: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._turns: dict[str, asyncio.Task[TurnResult]] = {}
        self._ending: dict[tuple[str, str], asyncio.Task[EndReport]] = {}
        self._incognito: dict[str, IncognitoSession] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._health: tuple[float, Health] | None = None  # (when, the last check's result)
        self.gate = IdleGate()  # session ends give way to chat turns
        # Progress of session ends goes to subscribers as it changes (throttled), for the TUI.
        progress = Throttle(self._progress_changed, PROGRESS_EVERY_S, spawn=self._spawn)
        self.ends = SessionEnds(self.gate, on_change=progress.poke)
        self.profile_errors = ProfileErrors()  # profiles whose file could not be opened
        self.config_errors: list[str] = []  # config.toml's problems (set by the daemon)

    # -- resources -----------------------------------------------------------------------------

    def profile(self, name: str | None) -> str:
        """The profile a request names, or the configured one."""
        return check_profile_name(name or self.settings.memory.effective_profile())

    @property
    def profiles(self) -> list[str]:
        """The profiles whose file is open."""
        return sorted(self._stores)

    async def store(self, profile: str) -> MemoryStore:
        """The profile's store, opened once: concurrent first uses share one open (a second
        connection would be left behind, and its thread keeps the process from exiting)."""
        if profile not in self._stores:
            path = self.paths.profile_db(profile)
            self.profile_errors.check(profile, path)  # a damaged file is not opened again
            if profile not in self._opening:
                self._opening[profile] = asyncio.ensure_future(
                    MemoryStore.open(path, embedder=self._embedder())
                )
            opening = self._opening[profile]
            try:
                store = await asyncio.shield(opening)
            except NaviError as exc:  # that profile's error; the others go on
                self.profile_errors.record(profile, path, exc)
                raise
            finally:
                if opening.done():
                    self._opening.pop(profile, None)
            self.profile_errors.clear(profile)
            # The rolling daily backup, after writes (backup.py); read live from the settings.
            store.db.backups = lambda: self.settings.memory.backups
            self._stores.setdefault(profile, store)
        return self._stores[profile]

    def _embedder(self) -> Any:
        choice = self.settings.memory.embedder
        if choice == "none":
            return None
        if choice == "local":
            from navi_desktop.memory.embedders import LocalEmbedder

            return LocalEmbedder()
        from navi_desktop.memory.embedders import OllamaEmbedder

        return OllamaEmbedder(self.settings.ollama.embedding_model, self._embed)

    async def _embed(self, model: str, texts: list[str]) -> list[list[float]]:
        # Looked up per call: a store opened before a host change embeds through the new one.
        return await self.backend().embed_fn(model, texts)

    def apply_settings(self, new: Settings) -> None:
        """Take new settings. A new Ollama host or timeout gets a new client at once; turns
        and session ends under way finish on the old one, which is closed after them."""
        old, self.settings = self.settings, new
        client = ("host", "timeout_s", "background_timeout_s")
        moved = any(getattr(old.ollama, k) != getattr(new.ollama, k) for k in client)
        if moved and self._backend is not None:
            retired, self._backend, self._health = self._backend, None, None
            self._spawn(self._retire(retired))

    async def _retire(self, backend: OllamaBackend) -> None:
        busy = {*self._turns.values(), *self._ending.values()}
        if busy:
            await asyncio.wait(busy)  # wait, never cancel: they are not ours to stop
        await backend.aclose()

    def backend(self) -> OllamaBackend:
        if self._backend is None:
            from navi_desktop.llm.backend import OllamaBackend

            self._backend = OllamaBackend(
                self.settings.ollama.host,
                timeout=self.settings.ollama.timeout_s,
                background_timeout=self.settings.ollama.background_timeout_s,
            )
        return self._backend

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _progress_changed(self) -> None:
        await self.broadcast("sessions", "session.progress", {"extracting": self.ends.status()})

    @property
    def end_settings(self) -> EndSettings:
        return EndSettings(model=self.settings.ollama.chat_model)

    # -- the session-end seam ------------------------------------------------------------------

    async def end(self, profile: str, session_id: str, trigger: str) -> EndReport:
        """End a session, whatever the trigger; concurrent calls share one run."""
        key = (profile, session_id)
        if key in self._ending:
            return await self._ending[key]
        timer = self._timers.pop(key, None)
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()
        self._ending[key] = task = asyncio.ensure_future(self._end(profile, session_id, trigger))
        try:
            return await task
        finally:
            self._ending.pop(key, None)

    async def _end(self, profile: str, session_id: str, trigger: str) -> EndReport:
        store = await self.store(profile)
        track = self.ends.track(profile, session_id, trigger, self.backend(), self.end_settings)
        with track as (model, settings):  # gives way to chat turns; progress for the status
            report = await end_session(store, model, session_id, settings)
        log.info("session %s ended (%s): %s", session_id, trigger, report.status)
        if report.status == "processed":
            await self._embed_quietly(store)
            await self.broadcast(
                "memory",
                "memory.changed",
                {"profile": profile, "ids": [i for ids in report.learned.values() for i in ids]},
            )
        await self.broadcast(
            "sessions",
            "session.state",
            {
                "profile": profile,
                "session_id": session_id,
                "state": report.status,
                "reason": report.reason,
                "trigger": trigger,  # what was learned and dropped: clients tell the user
                "learned": report.learned,
                "dropped": report.dropped,
                "offered": report.offered,
            },
        )
        return report

    def idle_seconds(self) -> float:
        """How long a session may sit without a message before it is ended."""
        return self.settings.memory.inactivity_timeout_min * 60.0

    def _touch(self, profile: str, session_id: str) -> None:
        """Restart the session's inactivity timer."""
        key = (profile, session_id)
        if (old := self._timers.get(key)) is not None:
            old.cancel()
        delay = self.idle_seconds()

        async def expire() -> None:
            await asyncio.sleep(delay)
            self._timers.pop(key, None)
            await self.end(profile, session_id, "inactivity")

        self._timers[key] = self._spawn(expire())

    async def recover(self) -> None:
        """At start: end the sessions a crash (or a failed extraction) left unprocessed."""
        root = self.paths.data / "profiles"
        for folder in sorted(root.glob("*/memory.db")) if root.exists() else []:
            profile = folder.parent.name
            try:
                store = await self.store(profile)
            except NaviError:  # logged and kept as that profile's error state
                continue
            for session in await store.sessions_to_process(include_open=True):
                self._spawn(self.end(profile, session.id, "recovery"))

    async def retry_due(self) -> int:
        """Run the session end again for pending sessions whose retry time has come."""
        started = 0
        idle = iso(datetime.now(UTC) - timedelta(seconds=self.idle_seconds()))
        for profile, store in list(self._stores.items()):
            # Pending ones, and ones past their inactivity without a timer: their end failed
            # before even "pending" could be saved (a full disk).
            for session in await store.sessions_to_process(idle_before=idle):
                key = (profile, session.id)
                if key not in self._ending and key not in self._timers:
                    self._spawn(self.end(profile, session.id, "retry"))
                    started += 1
        for profile, store in list(self._stores.items()):
            # A forget whose scrub waited for another reader of the file: done once it closed.
            if done := await finish_scrubs(store):
                ids = [i for scrub in done for i in scrub["ids"]]
                await self.broadcast("memory", "memory.scrubbed", {"profile": profile, "ids": ids})
        return started

    async def _after_forget(self, store: MemoryStore) -> None:
        try:
            await after_forget(store, self.backend(), self.end_settings)
        except Exception:  # a rewrite is cosmetic: the forgotten text is already gone
            log.exception("rewriting after a forget failed")

    async def shutdown(self, budget_s: float = 20.0) -> None:
        """End every open session within ``budget_s``, then close the files."""
        for task in list(self._turns.values()):
            task.cancel()
        for timer in list(self._timers.values()):
            timer.cancel()
        pending = list(self._timers)
        self._timers.clear()
        for profile, store in self._stores.items():
            for session in await store.sessions_to_process(include_open=True):
                if (profile, session.id) not in pending:
                    pending.append((profile, session.id))
        if pending:
            ends = [asyncio.ensure_future(self.end(p, s, "shutdown")) for p, s in pending]
            _, late = await asyncio.wait(ends, timeout=budget_s)
            for task in late:
                task.cancel()  # left pending; recovery ends it at the next start
            await asyncio.gather(*late, return_exceptions=True)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._backend is not None:
            await self._backend.aclose()
        for store in self._stores.values():
            await store.close()
        self._stores.clear()

    # -- RPC methods -------------------------------------------------------------------------

    def handlers(self) -> dict[str, Handler]:
        methods: dict[str, Handler] = {
            "daemon.status": self.status,
            "chat.send": self.chat_send,
            "chat.regenerate": self.chat_regenerate,
            "chat.cancel": self.chat_cancel,
            "sessions.create": self.sessions_create,
            "sessions.list": self.sessions_list,
            "sessions.show": self.sessions_show,
            "sessions.rename": self.sessions_rename,
            "sessions.delete": self.sessions_delete,
            "sessions.export": self.sessions_export,
            "sessions.end": self.sessions_end,
            "sessions.keep": self.sessions_keep,
        }
        methods |= ollama_api.handlers(self)
        methods |= feedback_api.handlers(self)
        methods |= profiles.handlers(self)
        methods |= {name: self._memory_handler(name) for name in memory_api.METHODS}
        return require_models(methods)  # a method that declares no parameters is refused

    async def _embed_quietly(self, store: MemoryStore) -> None:
        try:
            await store.backfill_embeddings(messages=False)
        except Exception as exc:  # no embedding model now: text search works, retried later
            log.info("embedding later: %s", exc)

    def _memory_handler(self, method: str) -> Handler:
        model = memory_params.model_for(method)  # none: refused here, at registration

        async def handle(params: dict[str, Any], peer: Any) -> Any:
            name, kwargs = memory_params.arguments(method, params)
            profile = self.profile(name)
            store = await self.store(profile)
            forgetting = method == "memory.forget"
            if forgetting:  # what it matches, to scrub the logs the same way
                scope = kwargs.get("scope", "everywhere")
                needles = await store.forget_needles(kwargs["memory_id"], scope)
            result, writes = await memory_params.call(store, method, kwargs)
            if forgetting:
                await asyncio.to_thread(scrub_logs, self.paths.state, needles)
                self._spawn(self._after_forget(store))  # redacted summaries read well again
            if writes:
                self._spawn(self._embed_quietly(store))
                await self.broadcast(
                    "memory", "memory.changed", {"profile": profile, "method": method}
                )
            return result

        handle.params_model = model  # type: ignore[attr-defined]
        return handle

    async def ollama_health(self, max_age_s: float = 0.0) -> Health:
        """Ollama's state: the last check when it is younger than ``max_age_s``, else a new one
        (the daemon's monitor checks every ``OLLAMA_CHECK_S``)."""
        if self._health is not None and time.monotonic() - self._health[0] < max_age_s:
            return self._health[1]
        health = await self.backend().health()
        self._health = (time.monotonic(), health)
        return health

    @takes(mp.NoParams)
    async def status(self, params: mp.NoParams, peer: Any) -> dict[str, Any]:
        # The status line asks after every turn: the monitor's last check answers it.
        health = await self.ollama_health(max_age_s=OLLAMA_CHECK_S)
        pending, reason = 0, None
        for store in self._stores.values():
            try:
                n, r = await store.pending_status()
            except NaviError:  # that profile's trouble: its own calls say what it is
                continue
            pending += n
            reason = reason or r
        return {
            "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - self.started, 1),
            "ollama": ollama_api.health_result(health),
            "chat_model": self.settings.ollama.chat_model,
            "embedding_model": self.settings.ollama.embedding_model,
            "open_sessions": len(self._timers) + len(self._incognito),
            "pending_extractions": pending,
            "extracting": self.ends.status(),
            "last_failure": reason,
            "profiles": self.profiles,
            "profile_errors": self.profile_errors.to_dict(),
            "config_errors": self.config_errors,
        }

    def incognito_session(self, session_id: str) -> IncognitoSession | None:
        return self._incognito.get(session_id)

    def _new_incognito(self) -> IncognitoSession:
        session = IncognitoSession(read_memory=self.settings.incognito.read_memory)
        self._incognito[session.id] = session
        return session

    def _turn_args(self, peer: Any) -> dict[str, Any]:
        """What every turn is given: the backend, the model, the memory budget, the caller."""
        return {
            "backend": self.backend(),
            "model": self.settings.ollama.chat_model,
            "emit": peer.notify,
            "context": ContextSettings(budget_tokens=self.settings.memory.budget_tokens),
            "reply_tokens": self.settings.ollama.reply_max_tokens,
        }

    @takes(mp.ChatSend)
    async def chat_send(self, params: mp.ChatSend, peer: Any) -> dict[str, Any]:
        text = params.text
        profile = self.profile(params.profile)
        session_id = params.session_id
        if params.incognito or session_id in self._incognito:
            session = self._incognito.get(session_id) if session_id else None
            if session is None:
                session = self._new_incognito()
            path = self.paths.profile_db(profile)
            store = await memory_to_read(session, path, partial(self.store, profile))
            turn = run_incognito_turn(
                session=session, store=store, text=text, **self._turn_args(peer)
            )
            return await self._incognito_turn(session.id, turn)

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
    async def chat_regenerate(self, params: mp.ChatSession, peer: Any) -> dict[str, Any]:
        """Answer the session's last user message again, replacing the last reply."""
        session_id = params.session_id
        if (session := self._incognito.get(session_id)) is not None:
            profile = self.profile(params.profile)
            path = self.paths.profile_db(profile)
            store = await memory_to_read(session, path, partial(self.store, profile))
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

            return await self._incognito_turn(session_id, incognito_turn())

        profile = self.profile(params.profile)
        store = await self.store(profile)
        await store.get_session(session_id)

        async def turn(**args: Any) -> TurnResult:
            user = await store.drop_last_reply(session_id)
            return await run_turn(text=user.content, reuse_user=user, **args)

        return await self._stored_turn(profile, store, session_id, peer, turn)

    async def _incognito_turn(
        self, session_id: str, turn: Coroutine[Any, Any, TurnResult]
    ) -> dict[str, Any]:
        result = await self._run(session_id, turn)
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
                session_id, turn(store=store, session_id=session_id, use_tools=use_tools, **args)
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
        return result.to_dict() | {"incognito": False}

    async def _supports_tools(self, model: str) -> bool:
        try:
            return await self.backend().supports_tools(model)
        except Exception:  # the chat call itself reports what is wrong with the server
            return False

    async def _run(self, session_id: str, turn: Coroutine[Any, Any, TurnResult]) -> TurnResult:
        """Run one turn as the session's only one (``chat.cancel`` cancels it)."""
        if session_id in self._turns:
            turn.close()  # never started: close it rather than leave it un-awaited
            raise InvalidInput(f"session {session_id} is already answering; cancel it first")
        task = asyncio.ensure_future(turn)
        self._turns[session_id] = task
        try:
            with self.gate.turn():  # a session end's model request stands aside meanwhile
                return await task
        finally:
            self._turns.pop(session_id, None)

    @takes(mp.ChatSession)
    async def chat_cancel(self, params: mp.ChatSession, peer: Any) -> dict[str, Any]:
        task = self._turns.get(params.session_id)
        if task is None:
            return {"cancelled": False}
        task.cancel()
        return {"cancelled": True}

    @takes(mp.SessionsCreate)
    async def sessions_create(self, params: mp.SessionsCreate, peer: Any) -> dict[str, Any]:
        if params.incognito:
            return {"id": self._new_incognito().id, "incognito": True}
        store = await self.store(self.profile(params.profile))
        created = await store.create_session((params.title or "").strip() or None)
        return created.to_dict() | {"incognito": False}

    @takes(mp.SessionsList)
    async def sessions_list(self, params: mp.SessionsList, peer: Any) -> list[dict[str, Any]]:
        store = await self.store(self.profile(params.profile))
        return [s.to_dict() for s in await store.list_sessions(limit=params.limit)]

    @takes(mp.SessionById)
    async def sessions_show(self, params: mp.SessionById, peer: Any) -> dict[str, Any]:
        store = await self.store(self.profile(params.profile))
        session_id = params.id
        session = await store.get_session(session_id)
        return session.to_dict() | {
            "messages": [m.to_dict() for m in await store.messages(session_id)]
        }

    @takes(mp.SessionsRename)
    async def sessions_rename(self, params: mp.SessionsRename, peer: Any) -> dict[str, Any]:
        store = await self.store(self.profile(params.profile))
        renamed = await store.rename_session(params.id, params.title)
        return renamed.to_dict()

    @takes(mp.SessionById)
    async def sessions_delete(self, params: mp.SessionById, peer: Any) -> dict[str, Any]:
        session_id = params.id
        if self._incognito.pop(session_id, None) is not None:
            return {"deleted": session_id, "messages": 0}
        profile = self.profile(params.profile)
        if (timer := self._timers.pop((profile, session_id), None)) is not None:
            timer.cancel()
        count = await (await self.store(profile)).delete_session(session_id)
        return {"deleted": session_id, "messages": count}

    @takes(mp.SessionById)
    async def sessions_export(self, params: mp.SessionById, peer: Any) -> dict[str, Any]:
        store = await self.store(self.profile(params.profile))
        return {"markdown": await store.export_session(params.id)}

    @takes(mp.SessionsKeep)
    async def sessions_keep(self, params: mp.SessionsKeep, peer: Any) -> dict[str, Any]:
        """Turn an incognito session into a stored one: from now on it is a normal session
        (saved, ended after inactivity, learned from)."""
        session_id = params.id
        incognito = self._incognito.get(session_id)
        if incognito is None:
            raise NotFound(f"no incognito session with id {session_id!r}")
        if session_id in self._turns:
            raise InvalidInput(f"session {session_id} is answering; wait or cancel it first")
        title = (params.title or "").strip() or "Kept from incognito"
        profile = self.profile(params.profile)
        # Out of the map before the first await: a message sent meanwhile cannot land in it.
        self._incognito.pop(session_id)
        try:
            store = await self.store(profile)
            created = await store.create_session(title)
            saved = 0
            for message in incognito.history:
                if message["role"] in ("user", "assistant") and message["content"]:
                    # An empty reply is a cancelled one; chat.send does not store those either.
                    await store.save_message(created.id, message["role"], message["content"])
                    saved += 1
        except BaseException:
            self._incognito[session_id] = incognito  # not kept: still incognito, nothing lost
            raise
        self._touch(profile, created.id)
        await self.broadcast(
            "sessions", "session.updated", {"profile": profile, "session_id": created.id}
        )
        kept = await store.get_session(created.id)
        return kept.to_dict() | {"incognito": False, "messages": saved}

    @takes(mp.SessionsEnd)
    async def sessions_end(self, params: mp.SessionsEnd, peer: Any) -> list[dict[str, Any]]:
        """End one session (``id``) or every unprocessed one (``all``) now."""
        profile = self.profile(params.profile)
        store = await self.store(profile)
        if params.all or params.id is None:
            for sid in list(self._incognito):
                self._incognito.pop(sid).discard()
            ids = [s.id for s in await store.sessions_to_process(include_open=True)]
        else:
            session_id = params.id
            if session_id in self._incognito:
                self._incognito.pop(session_id).discard()
                return [{"session_id": session_id, "status": "discarded"}]
            await store.get_session(session_id)
            ids = [session_id]
        reports = [await self.end(profile, sid, "explicit") for sid in ids]
        return [_report(r) for r in reports]


def _report(r: EndReport) -> dict[str, Any]:
    return {
        "session_id": r.session_id,
        "status": r.status,
        "reason": r.reason,
        "learned": r.learned,
        "dropped": r.dropped,
        "offered": r.offered,
        "notes": r.notes,
        "chunks": r.chunks,
        "llm_calls": r.llm_calls,
        "summary_id": r.summary_id,
        "profile_updated": r.profile_updated,
    }
