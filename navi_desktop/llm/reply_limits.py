"""Bounds on the bytes a model server may send, counted as they arrive.

The ``ollama`` client reads a stream line by line and a non-streamed reply whole, and keeps
what it has read until a line (or the body) ends: a server that never ends one grows the
daemon without limit until a deadline, minutes away. Here every response's byte stream is
counted on the way in, and fails once a line or the whole body is longer than the request
can need (:class:`RefusedReply`); a request sets its limit with :func:`reply_limit`.

Stdlib and ``httpx`` only: the backend wires :func:`bound_replies` into its HTTP client.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx

from navi_desktop.llm.budget import MAX_CHARS_PER_TOKEN

MB = 1_000_000
# A character of a JSON string is at most 12 bytes on the wire: an escaped surrogate pair.
ESCAPED_CHAR_BYTES = 12
# What a reply carries beside its text (names, timings, done_reason): a few hundred bytes,
# with room to spare.
ENVELOPE = MB
# A streamed chat line is one chunk: a token, or the model's tool calls. Navi takes tool
# arguments of at most 20,000 characters (limits.MAX_VALUE), 240 kB escaped; this holds
# several such calls in one chunk.
CHAT_LINE = 4 * MB
# Version, model list, model details (license and template included): tens of kilobytes.
PROBE = 8 * MB
# Pull progress: lines of a few hundred bytes, for as long as a download takes.
PULL_LINE = MB
# An answer that is no success (an error, a redirect) is read whole, even for a stream:
# Ollama's are a line of JSON, a proxy's a short web page.
NOT_SUCCESS = MB
# Embeddings: the widest models Ollama serves have 4,096 dimensions; a float32 is at most
# ~15 characters in JSON ("-1.2345678e-05" and its comma), 25 with room to spare.
EMBED_DIMS = 8192
FLOAT_BYTES = 25


@dataclass(frozen=True)
class ReplyLimit:
    """The longest line, and the most bytes in all (None: a stream, never held whole)."""

    line: int
    body: int | None


def _whole_mb(size: float) -> int:
    """Rounded up to whole megabytes: the limit a user reads in an error is a round one."""
    return max(1, math.ceil(size / MB)) * MB


def structured_limit(num_predict: int) -> ReplyLimit:
    """A non-streamed reply of at most ``num_predict`` tokens, as text and as thinking (a
    thinking model may send both), every character escaped at worst. A reply past the tokens
    is refused after parsing (backend._structured); this only stops one without end."""
    size = _whole_mb(2 * num_predict * MAX_CHARS_PER_TOKEN * ESCAPED_CHAR_BYTES + ENVELOPE)
    return ReplyLimit(size, size)


def embed_limit(texts: int, dims: int = 0) -> ReplyLimit:
    """One embedding batch of ``texts``, each of up to ``max(dims, EMBED_DIMS)`` numbers."""
    size = _whole_mb(texts * max(dims, EMBED_DIMS) * FLOAT_BYTES + ENVELOPE)
    return ReplyLimit(size, size)


PROBE_LIMIT = ReplyLimit(PROBE, PROBE)
PULL_LIMIT = ReplyLimit(PULL_LINE, None)
# A streamed chat reply, line by line. (Its length is the reader's to cut: a reply past its
# num_predict is cut where it is read, daemon/chat.py.)
CHAT_LIMIT = ReplyLimit(CHAT_LINE, None)
# Any request that named no limit of its own.
DEFAULT_LIMIT = PROBE_LIMIT
ERROR_LIMIT = ReplyLimit(NOT_SUCCESS, NOT_SUCCESS)


class RefusedReply(Exception):
    """A response not read on: a line or a body past its limit, or a compressed body.
    Its text completes "the server sent a ..." (llm.translate)."""


def _too_long(what: str, limit: int) -> RefusedReply:
    return RefusedReply(f"{what} over {limit / MB:g} MB")


_limit: ContextVar[ReplyLimit | None] = ContextVar("navi_reply_limit", default=None)


@contextmanager
def reply_limit(limit: ReplyLimit) -> Iterator[None]:
    """Requests sent in this block get ``limit`` (it is taken when the response starts, and
    holds for all of it, however long it is read after)."""
    token = _limit.set(limit)
    try:
        yield
    finally:
        _limit.reset(token)


class _Counted(httpx.AsyncByteStream):
    """A response body that fails once a line or the whole is longer than its limit. (An
    iterator, not an async generator: the reader never closes what it iterates.)"""

    def __init__(self, inner: httpx.AsyncByteStream, limit: ReplyLimit) -> None:
        self._inner = inner
        self._limit = limit
        self._chunks: AsyncIterator[bytes] | None = None
        self._total = self._line = 0  # bytes in all, and in the line not yet ended

    def __aiter__(self) -> AsyncIterator[bytes]:
        self._chunks = self._inner.__aiter__()
        return self

    async def __anext__(self) -> bytes:
        assert self._chunks is not None
        chunk = await self._chunks.__anext__()
        longest, body = self._limit.line, self._limit.body
        self._total += len(chunk)
        if body is not None and self._total > body:
            raise _too_long("reply", body)
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if self._line + end - start > longest:
                raise _too_long("reply line", longest)
            self._line, start = 0, end + 1
        self._line += len(chunk) - start
        if self._line > longest:  # before the reader sees it: it keeps at most the limit
            raise _too_long("reply line", longest)
        return chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


async def bound_replies(response: httpx.Response) -> None:
    """An httpx response hook: count the body's bytes under the request's limit.

    A compressed body is refused: its bytes would be counted before they are inflated (a
    small gzip can hold gigabytes). Navi asks for none, and Ollama sends none."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        named = re.sub(r"[^\w,.-]", "", encoding)[:40]  # the server's text: no control bytes
        raise RefusedReply(f"{named}-compressed reply")
    limit = (_limit.get() or DEFAULT_LIMIT) if response.is_success else ERROR_LIMIT
    response.stream = _Counted(response.stream, limit)


def bounded_http() -> dict[str, Any]:
    """The options of an ``httpx.AsyncClient`` (``ollama.AsyncClient`` passes them on) whose
    every response is counted under its request's limit."""
    return {
        "headers": {"Accept-Encoding": "identity"},
        "event_hooks": {"response": [bound_replies]},
    }
