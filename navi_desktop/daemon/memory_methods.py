"""The daemon's ``memory.*`` methods, mixed into :class:`~navi_desktop.daemon.service.Service`:
each runs the profile's store method (memory_params.py declares its parameters), then what a
write or a forget leaves to do: embedding, the logs' scrub, rewriting redacted summaries."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from navi_desktop.daemon import memory_params
from navi_desktop.errors import NaviError
from navi_desktop.pipeline.forgetting import after_forget

if TYPE_CHECKING:
    from navi_desktop.daemon.service import Handler, Service
    from navi_desktop.memory.store import MemoryStore

log = logging.getLogger(__name__)


class MemoryMethods:
    def _memory_handler(self: Service, method: str) -> Handler:
        model = memory_params.model_for(method)  # none: refused here, at registration

        async def handle(params: dict[str, Any], peer: Any) -> Any:
            name, kwargs = memory_params.arguments(method, params)
            profile = self.profile(name)
            reads = not memory_params.writes(method)
            store = await (self.read_store if reads else self.store)(profile)
            result, writes = await memory_params.call(store, method, kwargs)
            if method == "memory.stats" and self.empty.serves(store):  # its path, not ours
                result |= {"path": str(self.paths.profile_db(profile)), "file_bytes": 0}
            if method == "memory.forget":  # (the store scrubbed the logs: service.store)
                self._spawn(self._after_forget(store))  # redacted summaries read well again
            if writes:
                self._spawn(self._embed_quietly(store, profile))
                await self.broadcast(
                    "memory", "memory.changed", {"profile": profile, "method": method}
                )
            return result

        handle.params_model = model  # type: ignore[attr-defined]
        return handle

    async def _after_forget(self: Service, store: MemoryStore) -> None:
        try:
            await after_forget(store, self.backend(), self.end_settings)
        except Exception:  # a rewrite is cosmetic: the forgotten text is already gone
            log.exception("rewriting after a forget failed")

    async def _embed_quietly(self: Service, store: MemoryStore, profile: str) -> None:
        before = embedding_problem(store)
        try:
            await store.backfill_embeddings(messages=False)
        except Exception as exc:  # no embedding model now: text search works, retried later
            log.info("embedding later: %s", exc)
        if (problem := embedding_problem(store)) != before:  # garbage, or its end: say so
            await self.broadcast(
                "memory", "memory.embedding", {"profile": profile, "problem": problem}
            )


def embedding_problem(store: Any) -> str | None:
    """Why the store's last embedding pass left texts without vectors (maintenance.py); None
    for a memory server that is away: its own calls say so."""
    try:
        return store.embedding_problem
    except NaviError:
        return None
