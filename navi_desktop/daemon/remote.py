"""Profiles kept on a memory server (``[memory] backend = "postgres"``): each is a
``BufferedStore`` (typing goes on through an outage, kept in a local outbox) and listens to
the server's change feed, so a fact learned by another machine's daemon reaches this one's
clients as the same ``memory.changed`` notification a local write sends."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from navi_desktop.daemon.files import scrub_logs
from navi_desktop.errors import NaviError
from navi_desktop.memory.backends import open_server_store
from navi_desktop.memory.outbox import Outbox

if TYPE_CHECKING:
    from navi_desktop.daemon.service import Service
    from navi_desktop.memory.pg.buffered import BufferedStore

log = logging.getLogger(__name__)
FEED_BATCH_S = 0.02  # changes heard this close together go out as one notification


class RemoteProfiles:
    def __init__(self, service: Service) -> None:
        self.service = service
        self._stores: dict[str, BufferedStore] = {}
        self._feeds: dict[str, Any] = {}  # profile -> ChangeFeed
        self._heard: dict[str, set[int]] = {}
        self._flushing: dict[str, asyncio.TimerHandle] = {}

    def store(self, profile: str) -> BufferedStore:
        if profile not in self._stores:
            from navi_desktop.memory.pg.buffered import BufferedStore

            outbox = Outbox(self.service.paths.profile_db(profile).parent / "outbox.db")
            self._stores[profile] = BufferedStore(
                lambda: self._open(profile), outbox, on_open=lambda s: self._listen(profile, s)
            )
        return self._stores[profile]

    async def _open(self, profile: str) -> Any:
        service = self.service
        try:
            store = await open_server_store(
                service.settings.memory, profile, embedder=service._embedder()
            )
        except NaviError as exc:
            log.debug("profile %s: %s", profile, exc)  # the caller says what it does instead
            raise
        log.info("profile %s on %s", profile, store.where)
        store.scrub_outside = partial(scrub_logs, service.paths.state)  # every forget
        return store

    async def _listen(self, profile: str, store: Any) -> None:
        """Hear the server's changes to this profile (a lost feed is opened again by
        ``keep_alive``)."""
        from navi_desktop.memory.pg.store import watch_changes

        old = self._feeds.pop(profile, None)
        if old is not None:
            await _close_quietly(old)
        try:
            feed = await watch_changes(store, lambda memory_id: self._changed(profile, memory_id))
        except NaviError as exc:
            log.warning("profile %s: no change feed yet: %s", profile, exc)
            return
        feed.conn.add_termination_listener(lambda _conn: self._feeds.pop(profile, None))
        self._feeds[profile] = feed

    def _changed(self, profile: str, memory_id: int) -> None:
        self._heard.setdefault(profile, set()).add(memory_id)
        if profile not in self._flushing:
            loop = asyncio.get_running_loop()
            self._flushing[profile] = loop.call_later(FEED_BATCH_S, self._flush, profile)

    def _flush(self, profile: str) -> None:
        self._flushing.pop(profile, None)
        ids = sorted(self._heard.pop(profile, set()))
        if ids:
            params = {"profile": profile, "method": "server", "ids": ids}
            self.service._spawn(self.service.broadcast("memory", "memory.changed", params))

    async def errors(self) -> dict[str, dict[str, str]]:
        """For ``daemon.status``: each server profile whose server did not answer last, with
        what waits in its outbox (the same shape as the file profiles' errors)."""
        out = {}
        for profile in sorted(self._stores):
            if (line := await self.waiting(profile)) is not None:
                out[profile] = {"kind": "StorageUnavailable", "message": line}
        return out

    async def waiting(self, profile: str) -> str | None:
        """Why ``profile``'s server did not answer last and what waits for it on this machine,
        in one line; None when it answers and nothing waits."""
        store = self._stores.get(profile)
        if store is None or not (store.away or store.kept_why):
            return None  # the server answers: the outbox is not read on every turn
        try:
            waiting = await store.outbox.messages_waiting()
        except NaviError as exc:  # a damaged or unreadable outbox: its own line is the news
            return str(exc)
        why = store.away or (store.kept_why if waiting else None)
        if why is None:
            return None
        if waiting:
            messages = f"{waiting} message{'s' * (waiting != 1)}"
            return f"{why}; {messages} kept on this machine until it is back"
        return f"{why}; what you type is kept on this machine meanwhile"

    def shown_server(self) -> str | None:
        """The memory server (password hidden) when profiles live on one, else None."""
        memory = self.service.settings.memory
        if memory.backend != "postgres":
            return None
        dsn = memory.effective_dsn()
        if not dsn:
            return "postgres (no server named: set [memory] dsn or NAVI_PG_DSN)"
        from navi_desktop.memory.pg.connect import shown

        return f"postgres {shown(dsn)}"

    async def keep_alive(self) -> None:
        """For each server profile: connect if it is not, replay what the outbox kept, and
        listen again where the change feed was lost."""
        for profile, store in list(self._stores.items()):
            try:
                sent = await store.keep_alive()
                if profile not in self._feeds:
                    await self._listen(profile, await store.server())
            except NaviError as exc:
                log.info("profile %s: memory server still away: %s", profile, exc)
                continue
            if sent:
                params = {"profile": profile, "method": "outbox"}
                await self.service.broadcast("memory", "memory.changed", params)

    async def close(self) -> None:
        for handle in self._flushing.values():
            handle.cancel()
        self._flushing.clear()
        feeds, self._feeds = list(self._feeds.values()), {}
        await asyncio.gather(*(_close_quietly(feed) for feed in feeds))
        self._stores.clear()  # the service closes the stores themselves


async def _close_quietly(feed: Any) -> None:
    try:
        await feed.close()
    except Exception as exc:  # a feed whose server went away: nothing left to close
        log.debug("closing a change feed: %s", exc)
