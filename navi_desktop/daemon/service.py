"""What the daemon does: the RPC methods over the memory engine, the pipeline and Ollama,
plus the session lifecycle (inactivity timers, the session-end seam, shutdown, recovery)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from navi_desktop.daemon import (
    feedback_api,
    memory_api,
    ollama_api,
    open_profiles,
    profiles,
)
from navi_desktop.daemon import method_params as mp
from navi_desktop.daemon.background import IdleGate, SessionEnds, Throttle
from navi_desktop.daemon.chat import TurnResult
from navi_desktop.daemon.chat_methods import ChatMethods
from navi_desktop.daemon.empty_profile import EmptyProfile
from navi_desktop.daemon.files import scrub_logs
from navi_desktop.daemon.memory_methods import MemoryMethods
from navi_desktop.daemon.ollama_clients import OllamaClients
from navi_desktop.daemon.params import require_models, takes
from navi_desktop.daemon.profiles import ProfileErrors
from navi_desktop.daemon.remote import RemoteProfiles
from navi_desktop.daemon.session_methods import SessionMethods
from navi_desktop.daemon.status import daemon_status
from navi_desktop.errors import NaviError, StorageUnavailable
from navi_desktop.memory.backends import on_server
from navi_desktop.memory.clock import iso
from navi_desktop.memory.open_files import close_left
from navi_desktop.memory.store import MemoryStore
from navi_desktop.ollama_host import env_host_problems
from navi_desktop.paths import Paths, check_profile_name
from navi_desktop.pipeline.forgetting import finish_scrubs
from navi_desktop.pipeline.incognito import IncognitoSession
from navi_desktop.pipeline.session_end import EndReport, EndSettings, end_session

if TYPE_CHECKING:
    from navi_desktop.config import Settings
    from navi_desktop.llm.backend import OllamaBackend
    from navi_desktop.llm.types import Health

log = logging.getLogger(__name__)
Broadcast = Callable[[str, str, dict[str, Any]], Awaitable[object]]  # RpcServer.broadcast
Handler = Callable[[dict[str, Any], Any], Awaitable[Any]]
PROGRESS_EVERY_S = 1.0  # session-end progress notifications, at most this often
# How long a stop waits for cancelled work to unwind: a task cancelled in the middle of a
# memory server's statement may wait on that server (pg/db.py), which the stop does not.
SETTLE_S = 5.0


class Service(ChatMethods, SessionMethods, MemoryMethods):
    def __init__(self, paths: Paths, settings: Settings, broadcast: Broadcast) -> None:
        self.paths = paths
        self.settings = settings
        self.broadcast = broadcast
        self.started = time.monotonic()
        self._stores: dict[str, MemoryStore] = {}
        self._opening: dict[str, asyncio.Future[MemoryStore]] = {}
        self._used: dict[str, float] = {}  # each profile's last use (monotonic)
        self.ollama = OllamaClients(lambda: self.settings, self._busy, self._spawn)
        self._timers: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._turns: dict[str, asyncio.Task[TurnResult]] = {}
        self._ending: dict[tuple[str, str], asyncio.Task[EndReport]] = {}
        self._incognito: dict[str, IncognitoSession] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self.gate = IdleGate()  # session ends give way to chat turns
        # Progress of session ends goes to subscribers as it changes (throttled), for the TUI.
        progress = Throttle(self._progress_changed, PROGRESS_EVERY_S, spawn=self._spawn)
        self.ends = SessionEnds(self.gate, on_change=progress.poke)
        self.profile_errors = ProfileErrors()  # profiles whose file could not be opened
        self.config_errors: list[str] = []  # config.toml's problems (set by the daemon)
        self.env_errors = env_host_problems()  # read once: the environment is the start's
        self.remote = RemoteProfiles(self)  # profiles kept on a memory server
        self.empty = EmptyProfile()  # what reads of a profile with no file yet see

    # -- resources -----------------------------------------------------------------------------

    async def read_store(self, profile: str) -> MemoryStore:
        """The store for a call that only reads: see empty_profile.py."""
        return await self.empty.read_store(self, profile)

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
        self._used[profile] = time.monotonic()  # open_profiles.py closes the idle ones
        open_store = self._stores.get(profile)
        if isinstance(open_store, MemoryStore) and open_store.db.moved_away():
            profiles.replace_moved(self, profile)  # another program moved its file
        elif isinstance(open_store, MemoryStore) and profiles.writable_again(open_store):
            profiles.reopen(self, profile, "its file system is writable again")
        if profile not in self._stores:
            if on_server(self.settings.memory):  # opened on first use, survives outages
                self._stores[profile] = self.remote.store(profile)  # type: ignore[assignment]
                return self._stores[profile]
            path = self.paths.profile_db(profile)
            self.profile_errors.check(profile, path)  # a damaged file is not opened again
            open_profiles.refuse_alias(self, profile, path)
            if profile not in self._opening:
                await open_profiles.make_room(self, profile)
            if profile not in self._opening:
                self._opening[profile] = asyncio.ensure_future(profiles.open_store(self, path))
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
            store.scrub_outside = partial(scrub_logs, self.paths.state)  # every forget
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
        return await self.embedding_backend().embed_fn(model, texts)

    def apply_settings(self, new: Settings) -> None:
        """Take new settings. A new Ollama host or timeout gets new clients at once; turns
        and session ends under way finish on the old ones, which are closed after them."""
        old, self.settings = self.settings, new
        self.ollama.apply(old, new)
        if old.ollama.effective_embedding_host() != new.ollama.effective_embedding_host():
            for store in self._stores.values():
                if isinstance(store, MemoryStore):  # a server's store pauses on its own
                    store.forget_query_failures()
        where = (old.memory.backend, old.memory.dsn) != (new.memory.backend, new.memory.dsn)
        if where and self._stores:  # memory moved: profiles open again where it is now
            self._spawn(self._reopen_stores())

    async def _reopen_stores(self) -> None:
        """Close the open profiles once the turns and session ends under way are done; the
        next use opens each where the settings now keep it."""
        busy = self._busy()
        if busy:
            await asyncio.wait(busy)
        stores, self._stores = self._stores, {}
        await self.remote.close()
        self.remote = RemoteProfiles(self)
        for store in stores.values():
            try:
                await store.close()
            except Exception as exc:  # a server already gone: nothing left to close
                log.info("closing a profile after the move: %s", exc)
        log.info("memory is kept in %s now", self.settings.memory.backend)

    def _busy(self) -> set[asyncio.Task[Any]]:
        return {*self._turns.values(), *self._ending.values()}

    def backend(self) -> OllamaBackend:
        """The chat host's client: chat, extraction, summaries, pulls."""
        return self.ollama.chat()

    def embedding_backend(self) -> OllamaBackend:
        """The client that embeds (the chat host's unless ``embedding_host`` names another)."""
        return self.ollama.embedding()

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._spawned_done)
        return task

    def _spawned_done(self, task: asyncio.Task[Any]) -> None:
        """Background work no caller waits for: a failure is one line in the log (it was a
        traceback, "Task exception was never retrieved"), e.g. a session deleted while its
        end was being retried."""
        self._background.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            if isinstance(exc, NaviError):  # said in words: its line is enough
                log.warning("background work failed: %s", exc)
            else:  # a defect: where it happened matters
                log.error("background work failed", exc_info=exc)

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
            try:
                report = await end_session(store, model, session_id, settings)
            except StorageUnavailable as exc:  # the memory server is away: retried once back
                report = EndReport(session_id, "pending", str(exc))
        log.info("session %s ended (%s): %s", session_id, trigger, report.status)
        if report.status == "processed":
            await self._embed_quietly(store, profile)
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
        found = [f.parent.name for f in sorted(root.glob("*/memory.db"))] if root.exists() else []
        remote = on_server(self.settings.memory)
        if remote:  # the server's profiles are not listed here
            found = [self.profile(None)]
        for profile in found:
            try:
                store = await self.store(profile)
            except NaviError:  # logged and kept as that profile's error state
                continue
            except Exception:  # one profile's surprise must not stop the daemon's start
                log.exception("recovery of profile %s skipped", profile)
                continue
            if remote:
                # What was typed while the server was away goes first: the sessions ended
                # below are then learned with it, and other machines see it now, not at the
                # first retry.
                await self.remote.keep_alive()
            try:
                ending = await store.sessions_to_process(include_open=True)
            except NaviError as exc:  # a server not reachable yet: the retries catch up
                log.warning("recovery of profile %s waits: %s", profile, exc)
                continue
            for session in ending:
                self._spawn(self.end(profile, session.id, "recovery"))
            if not ending and not remote:
                await open_profiles.release(self, profile)  # opened only to look

    async def retry_due(self) -> int:
        """Run the session end again for pending sessions whose retry time has come."""
        started = 0
        await self.remote.keep_alive()  # kept messages replayed, change feeds listening again
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
            try:
                done = await finish_scrubs(store)
            except StorageUnavailable:  # a server profile's server is away: next time
                continue
            if done:
                ids = [i for scrub in done for i in scrub["ids"]]
                await self.broadcast("memory", "memory.scrubbed", {"profile": profile, "ids": ids})
        return started

    async def shutdown(self, budget_s: float = 20.0) -> None:
        """End every open session within ``budget_s``, then close the files."""
        for task in list(self._turns.values()):
            task.cancel()
        for timer in list(self._timers.values()):
            timer.cancel()
        pending = list(self._timers)
        self._timers.clear()
        for profile, store in list(self._stores.items()):
            for session in await store.sessions_to_process(include_open=True):
                if (profile, session.id) not in pending:
                    pending.append((profile, session.id))
        if pending:
            ends = [asyncio.ensure_future(self.end(p, s, "shutdown")) for p, s in pending]
            _, late = await asyncio.wait(ends, timeout=budget_s)
            for task in late:
                task.cancel()  # left pending; recovery ends it at the next start
            await _settle(late)
        for task in list(self._background):
            task.cancel()
        await _settle(set(self._background))
        await self.ollama.aclose()
        # Side by side: with a server that stopped answering, each close waits out its bound.
        # Every one is waited for: a close that fails (a full disk) leaves the others closing.
        stores, self._stores = self._stores, {}
        closes = {f"profile {p}": store.close() for p, store in stores.items()}
        closes["the memory server's change feeds"] = self.remote.close()
        closes["the empty profile"] = self.empty.close(self)
        results = await asyncio.gather(*closes.values(), return_exceptions=True)
        for what, result in zip(closes, results, strict=True):
            if isinstance(result, Exception):
                log.warning("%s not closed cleanly: %s", what, result)
        if left := await close_left(self.paths.data, self.paths.runtime):  # or it runs on
            log.warning("closed files nothing else had closed: %s", ", ".join(map(str, left)))

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

    async def ollama_health(self, max_age_s: float = 0.0) -> Health:
        """Ollama's state: the last check when it is younger than ``max_age_s``, else a new one
        (the daemon's monitor checks every ``OLLAMA_CHECK_S``)."""
        return await self.ollama.health(max_age_s)

    @takes(mp.NoParams)
    async def status(self, params: mp.NoParams, peer: Any) -> dict[str, Any]:
        return await daemon_status(self)


async def _settle(tasks: Collection[asyncio.Future[Any]]) -> None:
    """Let cancelled tasks finish, for at most SETTLE_S; one still waiting is left to the
    event loop's own shutdown."""
    if tasks:
        done, stuck = await asyncio.wait(tasks, timeout=SETTLE_S)
        for task in done:
            if not task.cancelled():
                task.exception()  # seen: a cancelled task's failure is no news at a stop
        if stuck:
            log.warning("stopping without waiting for %d task(s) on the memory server", len(stuck))
