"""``ollama.*`` over the socket: the settings screen's model list, connection test and pulls.

``host`` (models, test) asks another server than the configured one, so a host can be tried
before it is saved; ``embedding`` asks the configured embedding host (the chat host unless
``embedding_host`` names another). Errors leave as the backend's one-line ``LLMError`` s,
which say what to do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import asdict
from functools import partial
from typing import TYPE_CHECKING, Any

from navi_desktop.daemon.method_params import OllamaHost, OllamaPull
from navi_desktop.daemon.params import takes
from navi_desktop.llm.errors import OllamaError

if TYPE_CHECKING:
    from navi_desktop.daemon.service import Service
    from navi_desktop.llm.backend import OllamaBackend
    from navi_desktop.llm.types import Health

Handler = Callable[[dict[str, Any], Any], Awaitable[Any]]


def handlers(service: Service) -> dict[str, Handler]:
    return {
        "ollama.models": partial(models, service),
        "ollama.test": partial(test_connection, service),
        "ollama.pull": partial(pull, service),
    }


@asynccontextmanager
async def _backend(
    service: Service, host: str | None, embedding: bool = False
) -> AsyncIterator[OllamaBackend]:
    """A configured backend, or a temporary one for ``host`` (closed afterwards)."""
    if host is None:
        yield service.embedding_backend() if embedding else service.backend()
        return
    from navi_desktop.llm.backend import OllamaBackend
    from navi_desktop.llm.errors import EMBEDDING

    timeout = service.settings.ollama.timeout_s
    role = EMBEDDING if embedding else ""  # its errors then name it as the embedding host
    async with OllamaBackend(host, timeout=timeout, role=role) as backend:
        yield backend


@takes(OllamaHost)
async def models(service: Service, params: OllamaHost, peer: Any) -> dict[str, Any]:
    """The installed models, each with its capabilities (None where the server gave none)."""
    async with _backend(service, params.host, params.embedding) as backend:
        listing = await backend.models()
        # Capabilities say which models can chat, call tools or embed (the pickers need it).
        caps = await asyncio.gather(
            *(backend.capabilities(m.name) for m in listing), return_exceptions=True
        )
        return {
            "host": backend.host,
            # Where the embedding model must be instead, when another host embeds.
            "embedding_host": service.ollama.embedding_host(),
            "models": [
                asdict(m) | {"capabilities": None if isinstance(c, BaseException) else sorted(c)}
                for m, c in zip(listing, caps, strict=True)
            ],
        }


@takes(OllamaHost)
async def test_connection(service: Service, params: OllamaHost, peer: Any) -> dict[str, Any]:
    """A connection test that never fails for an unreachable host: ``error`` says why."""
    async with _backend(service, params.host, params.embedding) as backend:
        return health_result(await backend.health())


def health_result(health: Health) -> dict[str, Any]:
    """A connection test's JSON form (``ollama.test``, ``daemon.status``, ``ollama.state``)."""
    return {
        "host": health.host,
        "reachable": health.reachable,
        "version": health.version,
        "error": health.error,
    }


@takes(OllamaPull)
async def pull(service: Service, params: OllamaPull, peer: Any) -> dict[str, Any]:
    """Download a model on the configured server (the embedding host's with ``embedding``),
    sending each progress line to the caller as ``ollama.pull.progress``."""
    model = params.model
    status = ""
    backend = service.embedding_backend() if params.embedding else service.backend()
    async with aclosing(backend.pull(model)) as steps:
        async for step in steps:
            status = step.status
            await peer.notify(
                "ollama.pull.progress",
                {
                    "model": model,
                    "status": step.status,
                    "completed": step.completed,
                    "total": step.total,
                },
            )
    if status != "success":
        raise OllamaError(f"the pull of '{model}' ended without success (last step: {status!r})")
    return {"model": model, "status": "success"}
