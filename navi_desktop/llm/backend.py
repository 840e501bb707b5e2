"""Ollama behind one small async class; the only module in Navi that imports ``ollama``.

Every call has a limit: the HTTP client gets connect and read timeouts, non-streamed calls
run under an overall deadline, and streams under a first-token deadline and a per-chunk one.
Structured requests are background work with their own (longer) deadline, and every one is
bounded: explicit sampling options, ``num_predict`` sized to the schema, ``num_ctx`` to the
prompt plus that output within the model's context length (see :mod:`.budget`).
Every failure leaves as a :class:`~navi_desktop.llm.errors.LLMError` whose message says
what to do; nothing from ``ollama`` or ``httpx`` leaks to callers.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import aclosing
from typing import Any

import httpx

from navi_desktop.errors import InvalidInput
from navi_desktop.llm import reply_limits as limits
from navi_desktop.llm.budget import MAX_CHARS_PER_TOKEN, chat_request, structured_options
from navi_desktop.llm.calls import Calls
from navi_desktop.llm.errors import (
    BACKGROUND_TIMEOUT_SETTING,
    InvalidModelOutput,
    LLMError,
    OllamaError,
)
from navi_desktop.llm.jsontext import Found, find_json, whole, whole_value, why_not_json
from navi_desktop.llm.schema import clamp, schema_error
from navi_desktop.llm.tool_loop import ToolSpec
from navi_desktop.llm.types import (
    ChatEvent,
    ContentDelta,
    Done,
    Embeddings,
    Health,
    ModelInfo,
    PullProgress,
    ThinkingDelta,
    ToolCall,
    ToolCallsRequested,
    resolve_host,
)
from navi_desktop.ollama_host import hide_bad_env_hosts

hide_bad_env_hosts()  # the ollama package reads OLLAMA_HOST as it is imported, and fails on one
import ollama  # noqa: E402

ChatMessage = Mapping[str, Any]


class OllamaBackend(Calls):
    """Chat, structured output, embeddings and model management against one Ollama server.

    ``timeout``: the longest a non-streamed call (one embedding batch) may take, and by
    default the longest wait for a stream's first token (which includes loading the model).
    ``chunk_timeout``: the longest pause between two streamed chunks (default: ``timeout``).
    ``background_timeout``: the longest a structured request (extraction, summaries, profile)
    may take; nobody waits on those, and on a CPU they can take minutes (default: ``timeout``).
    ``probe_timeout``: version, model list and model info, which should answer at once.
    ``role``: "embedding" for a client of a separate embedding host; its errors name it so.
    """

    response_error = ollama.ResponseError  # for llm.translate

    def __init__(
        self,
        host: str | None = None,
        *,
        timeout: float = 120.0,
        connect_timeout: float = 5.0,
        first_token_timeout: float | None = None,
        chunk_timeout: float | None = None,
        probe_timeout: float = 10.0,
        background_timeout: float | None = None,
        embed_batch_size: int = 64,
        keep_alive: float | str | None = None,
        role: str = "",
    ) -> None:
        self.host = resolve_host(host)
        self.role = role
        self.timeout = timeout
        self.background_timeout = timeout if background_timeout is None else background_timeout
        self.connect_timeout = connect_timeout
        self.first_token_timeout = timeout if first_token_timeout is None else first_token_timeout
        self.chunk_timeout = chunk_timeout = timeout if chunk_timeout is None else chunk_timeout
        self.probe_timeout = probe_timeout
        self.embed_batch_size = max(1, embed_batch_size)
        self.keep_alive = keep_alive
        self.embedding_dims: dict[str, int] = {}
        self._capabilities: dict[str, frozenset[str]] = {}
        self._context_lengths: dict[str, int | None] = {}
        read = max(
            timeout, self.first_token_timeout, chunk_timeout, probe_timeout, self.background_timeout
        )
        http_timeout = httpx.Timeout(read, connect=connect_timeout)
        bounded = limits.bounded_http()  # every reply's bytes counted as they come (reply_limits)
        # Requests carry memories: they go to the configured host and nowhere else, not through
        # a proxy from the environment (HTTP_PROXY sent them there, 127.0.0.1 too) nor where a
        # redirect points (Ollama never redirects).
        bounded |= {"trust_env": False, "follow_redirects": False}
        self._client = ollama.AsyncClient(host=self.host, timeout=http_timeout, **bounded)
        # The client's own httpx client (same pool and timeouts) serves /api/version, which
        # ``ollama`` has no method for; fall back to a separate one should that attribute go.
        http = getattr(self._client, "_client", None)
        self._own_http = not isinstance(http, httpx.AsyncClient)
        self._http: httpx.AsyncClient = (
            httpx.AsyncClient(base_url=self.host, timeout=http_timeout, **bounded)
            if self._own_http
            else http
        )

    async def aclose(self) -> None:
        await self._client.close()
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> OllamaBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ---- server and models ------------------------------------------------------------------

    async def version(self) -> str:
        """The server's version (GET /api/version)."""

        async def get() -> str:
            response = await self._http.get("/api/version")
            response.raise_for_status()
            data = response.json()
            if not isinstance(data, dict) or not isinstance(data.get("version"), str):
                raise OllamaError(f"{self.host} does not look like an Ollama server")
            return data["version"]

        return await self._call("the version check", None, self.probe_timeout, get, setting=None)

    async def health(self) -> Health:
        """A connection test that never raises: ``error`` holds the one-line reason."""
        try:
            version = await self.version()
        except LLMError as exc:
            return Health(reachable=False, host=self.host, error=str(exc))
        return Health(reachable=True, host=self.host, version=version)

    async def models(self) -> list[ModelInfo]:
        """The installed models, as ``ollama list`` shows them."""
        listing = await self._call(
            "listing models", None, self.probe_timeout, self._client.list, setting=None
        )
        out = []
        for m in listing.models:
            details = m.details
            out.append(
                ModelInfo(
                    name=m.model or "",
                    size=int(m.size or 0),
                    digest=m.digest or "",
                    family=details.family if details else None,
                    parameter_size=details.parameter_size if details else None,
                    quantization=details.quantization_level if details else None,
                )
            )
        return out

    async def capabilities(self, model: str) -> frozenset[str]:
        """What the model can do ("completion", "tools", "thinking", "embedding", "vision"…),
        from /api/show; cached per model. Empty when the server does not report them."""
        _need_model(model)
        if (cached := self._capabilities.get(model)) is not None:
            return cached
        shown = await self._call(
            f"looking up '{model}'",
            model,
            self.probe_timeout,
            lambda: self._client.show(model),
            setting=None,
        )
        caps = frozenset(shown.capabilities or ())
        self._capabilities[model] = caps
        self._context_lengths[model] = _context_length(shown.modelinfo)
        return caps

    async def context_length(self, model: str) -> int | None:
        """The model's own context length in tokens (``<arch>.context_length`` from /api/show),
        or None when the server does not say or cannot be asked now (the request that needs
        it then reports what is wrong)."""
        if model not in self._context_lengths:
            try:
                await self.capabilities(model)
            except LLMError:
                return None
        return self._context_lengths.get(model)

    async def supports_tools(self, model: str) -> bool:
        return "tools" in await self.capabilities(model)

    def forget_capabilities(self, model: str | None = None) -> None:
        """Drop cached capabilities (all, or one model's), e.g. after a model was re-pulled."""
        if model is None:
            self._capabilities.clear()
            self._context_lengths.clear()
        else:
            self._capabilities.pop(model, None)
            self._context_lengths.pop(model, None)

    async def pull(self, model: str) -> AsyncIterator[PullProgress]:
        """Download a model, yielding progress lines until "success"."""
        _need_model(model)
        operation = f"the pull of '{model}'"
        start = lambda: self._client.pull(model, stream=True)  # noqa: E731
        async with aclosing(self._stream(operation, None, start, limits.PULL_LIMIT)) as parts:
            async for part in parts:
                yield PullProgress(part.status or "", part.completed, part.total, part.digest)
        self.forget_capabilities(model)

    # ---- chat ---------------------------------------------------------------------------------

    async def chat_stream(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] | None = None,
        think: bool | str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[ChatEvent]:
        """Stream one reply as events, ending with :class:`Done`.

        Closing the iterator (``aclose()``, ``aclosing``) or cancelling the consuming task
        closes the HTTP stream at once, which makes Ollama stop generating.
        """
        _need_model(model)
        operation = f"the chat with '{model}'"

        def start() -> Awaitable[AsyncGenerator[ollama.ChatResponse, None]]:
            return self._client.chat(
                model=model,
                messages=list(messages),
                tools=list(tools) if tools else None,
                think=think,
                options=options,
                keep_alive=self.keep_alive,
                stream=True,
            )

        content: list[str] = []
        thinking: list[str] = []
        calls: list[ToolCall] = []
        async with aclosing(self._stream(operation, model, start, limits.CHAT_LIMIT)) as parts:
            async for part in parts:
                message = part.message
                if message.thinking:
                    thinking.append(said := whole(message.thinking))
                    yield ThinkingDelta(said)
                if message.content:
                    content.append(said := whole(message.content))
                    yield ContentDelta(said)
                if message.tool_calls:
                    new = tuple(
                        ToolCall(
                            whole(c.function.name), whole_value(dict(c.function.arguments or {}))
                        )
                        for c in message.tool_calls
                    )
                    calls.extend(new)
                    yield ToolCallsRequested(new)
                if part.done:
                    yield Done(
                        model=part.model or model,
                        done_reason=part.done_reason,
                        prompt_eval_count=part.prompt_eval_count,
                        eval_count=part.eval_count,
                        total_duration=part.total_duration,
                        load_duration=part.load_duration,
                        prompt_eval_duration=part.prompt_eval_duration,
                        eval_duration=part.eval_duration,
                        content="".join(content),
                        thinking="".join(thinking),
                        tool_calls=tuple(calls),
                    )
                    return
        raise OllamaError(f"Ollama at {self.host} ended {operation} before the reply was done")

    async def chat_request(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        reply_tokens: int | None,
        options: Mapping[str, Any] | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """A chat prompt fitted to the model's context, and its options: the reply cap as
        ``num_predict`` and a ``num_ctx`` that holds the prompt, so the server does not cut
        it from the front."""
        return chat_request(messages, reply_tokens, await self.context_length(model), options)

    async def complete_json(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        schema: dict[str, Any],
        options: Mapping[str, Any] | None = None,
    ) -> Any:
        """One non-streamed reply constrained to ``schema`` (Ollama's ``format``), parsed;
        numbers clamped to the schema's bounds; text around the JSON ignored.

        Raises :class:`InvalidModelOutput` when the text holds no JSON or it does not match.
        """
        text, done_reason = await self._structured(model, messages, schema, options)
        found = find_json(text)
        if found is None:
            raise InvalidModelOutput(model, why_not_json(text, done_reason), text)
        value = clamp(found.value, schema)
        if problem := schema_error(value, schema):
            raise InvalidModelOutput(model, f"JSON that does not match the schema: {problem}", text)
        return value

    async def complete_json_loose(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        schema: dict[str, Any],
        options: Mapping[str, Any] | None = None,
    ) -> Found:
        """Like :meth:`complete_json`, for callers that check each item themselves: the JSON
        is not checked against the schema (only its numbers clamped), and an answer cut off at
        the output limit keeps its complete items (``cut``). Raises :class:`InvalidModelOutput`
        only when no JSON at all can be read."""
        text, done_reason = await self._structured(model, messages, schema, options)
        found = find_json(text, salvage=True)
        if found is None:
            raise InvalidModelOutput(model, why_not_json(text, done_reason), text)
        cut = found.cut or done_reason == "length"
        return Found(clamp(found.value, schema), prose=found.prose, cut=cut)

    async def _structured(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        schema: dict[str, Any],
        options: Mapping[str, Any] | None,
    ) -> tuple[str, str | None]:
        """Send one bounded structured request; the raw text and the done reason."""
        _need_model(model)
        bounded = structured_options(messages, schema, await self.context_length(model), options)
        response = await self._call(
            f"the JSON completion with '{model}'",
            model,
            self.background_timeout,
            lambda: self._client.chat(
                model=model,
                messages=list(messages),
                format=schema,
                options=bounded,
                keep_alive=self.keep_alive,
                stream=False,
            ),
            limits.structured_limit(bounded["num_predict"]),
            BACKGROUND_TIMEOUT_SETTING,
        )
        text = whole(response.message.content or "")
        if len(text) > (limit := bounded["num_predict"]) * MAX_CHARS_PER_TOKEN:
            # A server that ignored num_predict: not worth reading (salvage walks every character).
            problem = f"{len(text):,} characters, far beyond its limit of {limit} tokens"
            raise InvalidModelOutput(model, problem, text[:200])
        return text, response.done_reason

    # ---- embeddings ---------------------------------------------------------------------------

    async def embed(
        self, model: str, texts: Sequence[str], *, batch_size: int | None = None
    ) -> Embeddings:
        """Vectors for ``texts``, one request per batch; the dimension is recorded per model
        in ``embedding_dims``."""
        _need_model(model)
        texts = list(texts)
        size = max(1, batch_size or self.embed_batch_size)
        operation = f"embedding with '{model}'"
        vectors: list[list[float]] = []
        for start in range(0, len(texts), size):
            batch = texts[start : start + size]
            response = await self._call(
                operation,
                model,
                self.timeout,
                lambda batch=batch: self._client.embed(
                    model=model, input=batch, keep_alive=self.keep_alive
                ),
                limits.embed_limit(len(batch), self.embedding_dims.get(model, 0)),
            )
            if len(response.embeddings) != len(batch):
                raise OllamaError(
                    f"Ollama returned {len(response.embeddings)} vectors for {len(batch)} texts"
                    f" during {operation}"
                )
            vectors.extend(list(v) for v in response.embeddings)
        # Vectors of mixed sizes (or NaN, zeros) are the engine's to sort out text by text
        # (embedders.normalized): one text a model cannot embed must not hold up the others.
        dims = {len(v) for v in vectors}
        dim = dims.pop() if len(dims) == 1 else self.embedding_dims.get(model, 0)
        if len(vectors) and dim:
            self.embedding_dims[model] = dim
        return Embeddings(model=model, dim=dim, vectors=vectors)

    async def embed_fn(self, model: str, texts: list[str]) -> list[list[float]]:
        """``embed_fn(model, texts) -> vectors`` as :class:`OllamaEmbedder` expects it."""
        return (await self.embed(model, texts)).vectors


def _context_length(info: Mapping[str, Any] | None) -> int | None:
    """``<architecture>.context_length`` from /api/show's model_info."""
    if not info:
        return None
    arch = info.get("general.architecture")
    value = info.get(f"{arch}.context_length") if arch else None
    if value is None:
        value = next((v for k, v in info.items() if k.endswith(".context_length")), None)
    try:
        return int(value) if value is not None and int(value) > 0 else None
    except (TypeError, ValueError):
        return None


def _need_model(model: str) -> None:
    if not model or not model.strip():
        raise InvalidInput("no Ollama model chosen — pick one in settings")
