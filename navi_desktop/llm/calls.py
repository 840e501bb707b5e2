"""How the backend sends a request: under a deadline, within a limit on the reply's bytes
(:mod:`.reply_limits`), with every error translated (:mod:`.translate`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar

from navi_desktop.llm import reply_limits as limits
from navi_desktop.llm.errors import TIMEOUT_SETTING
from navi_desktop.llm.translate import Translate

T = TypeVar("T")


class Calls:
    """The plumbing of :class:`~navi_desktop.llm.backend.OllamaBackend`, which sets these."""

    host: str
    role: str
    connect_timeout: float
    first_token_timeout: float
    chunk_timeout: float
    response_error: type[Exception]

    async def _call(
        self,
        operation: str,
        model: str | None,
        seconds: float,
        make: Callable[[], Awaitable[T]],
        limit: limits.ReplyLimit = limits.DEFAULT_LIMIT,
        setting: str | None = TIMEOUT_SETTING,
    ) -> T:
        """Run one non-streamed request under a deadline (held by ``setting``) and a limit on
        the reply's bytes, translating errors."""
        with Translate(self, operation, model, seconds, setting), limits.reply_limit(limit):
            async with asyncio.timeout(seconds):
                return await make()

    async def _stream(
        self,
        operation: str,
        model: str | None,
        start: Callable[[], Awaitable[AsyncGenerator[T, None]]],
        limit: limits.ReplyLimit,
    ) -> AsyncGenerator[T, None]:
        """Items of a streamed request, with a first-item and a per-item deadline, and a limit
        on the bytes of each line.

        The request is sent at the first ``anext``; on close, cancel or error, the client's
        generator is closed, which closes the response and its connection.
        """
        with Translate(self, operation, model, self.first_token_timeout):
            stream = await start()
        try:
            first = True
            while True:
                seconds = self.first_token_timeout if first else self.chunk_timeout
                phase = "waiting for the first token" if first else "waiting for the next chunk"
                with (
                    Translate(self, f"{operation} ({phase})", model, seconds),
                    # The request is sent at the first item: the response keeps its limit.
                    limits.reply_limit(limit) if first else contextlib.nullcontext(),
                ):
                    try:
                        async with asyncio.timeout(seconds):
                            item = await anext(stream)
                    except StopAsyncIteration:
                        return
                first = False
                yield item
        finally:
            await stream.aclose()
