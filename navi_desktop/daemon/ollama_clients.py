"""The daemon's Ollama clients: one for the chat host (chat, extraction, summaries, pulls), and
one for the embedding host when ``[ollama] embedding_host`` (or ``NAVI_EMBEDDING_HOST``) names
another server, so that a desktop with a GPU can embed for a laptop. When both hosts are the
same, one client does both.

A change of host or timeout gets new clients at once; turns and session ends under way finish
on the old ones, which are closed after them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from navi_desktop.llm.errors import EMBEDDING

if TYPE_CHECKING:
    from navi_desktop.config import Settings
    from navi_desktop.llm.backend import OllamaBackend
    from navi_desktop.llm.types import Health

# The settings each client is built from: a change of any of them replaces it. (The embedding
# host falls back to the chat host, so it moves with that too.)
CHAT_KEYS = ("host", "timeout_s", "background_timeout_s")
EMBEDDING_KEYS = (*CHAT_KEYS, "embedding_host")


class OllamaClients:
    """``settings()`` is read on every use (the daemon replaces its settings on a reload);
    ``busy()`` are the tasks an old client must outlive; ``spawn`` runs a background task."""

    def __init__(
        self,
        settings: Callable[[], Settings],
        busy: Callable[[], set[asyncio.Task[Any]]],
        spawn: Callable[[Awaitable[Any]], object],
    ) -> None:
        self._settings = settings
        self._busy = busy
        self._spawn = spawn
        self._chat: OllamaBackend | None = None
        self._embedding: OllamaBackend | None = None
        self._health: dict[str, tuple[float, Health]] = {}  # role -> (when, the last check)

    def chat(self) -> OllamaBackend:
        if self._chat is None:
            self._chat = self._make(self._settings().ollama.host, "")
        return self._chat

    def embedding_host(self) -> str | None:
        """The embedding host when it is not the chat host, else None."""
        host = self._settings().ollama.effective_embedding_host()
        return None if host == self.chat().host else host

    def embedding(self) -> OllamaBackend:
        """The client that embeds: the chat client, unless the embedding host is another."""
        host = self.embedding_host()
        if host is None:
            return self.chat()
        if self._embedding is None or self._embedding.host != host:
            if self._embedding is not None:  # NAVI_EMBEDDING_HOST changed under us
                self._spawn(self._retire(self._embedding))
            self._embedding = self._make(host, EMBEDDING)
        return self._embedding

    def _make(self, host: str | None, role: str) -> OllamaBackend:
        from navi_desktop.llm.backend import OllamaBackend

        ollama = self._settings().ollama
        return OllamaBackend(
            host,
            timeout=ollama.timeout_s,
            background_timeout=ollama.background_timeout_s,
            role=role,
        )

    def apply(self, old: Settings, new: Settings) -> None:
        """New settings: clients whose host or timeouts moved are replaced."""

        def moved(keys: tuple[str, ...]) -> bool:
            return any(getattr(old.ollama, k) != getattr(new.ollama, k) for k in keys)

        retired = []
        if moved(CHAT_KEYS) and self._chat is not None:
            retired.append(self._chat)
            self._chat = None
            self._health.pop("", None)
        if moved(EMBEDDING_KEYS):
            if self._embedding is not None:
                retired.append(self._embedding)
                self._embedding = None
            self._health.pop(EMBEDDING, None)
        for client in retired:
            self._spawn(self._retire(client))

    async def _retire(self, backend: OllamaBackend) -> None:
        busy = self._busy()
        if busy:
            await asyncio.wait(busy)  # wait, never cancel: they are not ours to stop
        await backend.aclose()

    async def health(self, max_age_s: float = 0.0) -> Health:
        """The chat host's state: the last check when it is younger than ``max_age_s``, else
        a new one, made beside one of a separate embedding host (the daemon's monitor keeps
        both fresh for ``daemon.status``)."""
        cached = self._health.get("")
        if cached is not None and time.monotonic() - cached[0] < max_age_s:
            return cached[1]
        health, _ = await asyncio.gather(
            self._check("", self.chat, 0.0), self.embedding_health(0.0)
        )
        return health

    async def embedding_health(self, max_age_s: float = 0.0) -> Health | None:
        """The embedding host's state, as :meth:`health`; None when the chat host embeds."""
        if self.embedding_host() is None:
            return None
        return await self._check(EMBEDDING, self.embedding, max_age_s)

    async def _check(
        self, role: str, client: Callable[[], OllamaBackend], max_age_s: float
    ) -> Health:
        cached = self._health.get(role)
        if cached is not None and time.monotonic() - cached[0] < max_age_s:
            return cached[1]
        health = await client().health()
        self._health[role] = (time.monotonic(), health)
        return health

    async def aclose(self) -> None:
        for client in (self._chat, self._embedding):
            if client is not None:
                await client.aclose()
        self._chat = self._embedding = None
