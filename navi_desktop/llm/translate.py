"""Exceptions from the ``ollama`` client and ``httpx`` as one-line :class:`LLMError` s that say
what to do; nothing from those libraries reaches Navi's callers. (The backend, the one module
that imports ``ollama``, hands over its error class.)"""

from __future__ import annotations

import contextlib
import socket
from types import TracebackType
from typing import Any, Protocol

import httpx

from navi_desktop.llm.errors import (
    EMBEDDING,
    TIMEOUT_SETTING,
    LLMError,
    ModelMissing,
    OllamaError,
    OllamaTimeout,
    OllamaUnreachable,
    ToolsUnsupported,
    one_line,
)
from navi_desktop.llm.reply_limits import RefusedReply


class Where(Protocol):
    """The server a call went to (the backend)."""

    host: str
    role: str  # "" (chat and all), or "embedding" for a host that only embeds
    connect_timeout: float
    response_error: type[Exception]  # ollama.ResponseError


class Translate:
    """A ``with`` block whose client, HTTP and timeout exceptions leave as :class:`LLMError`.
    ``setting``: the one that holds ``seconds`` (None: a fixed limit), named in a timeout."""

    def __init__(
        self,
        where: Where,
        operation: str,
        model: str | None,
        seconds: float,
        setting: str | None = TIMEOUT_SETTING,
    ) -> None:
        self.where = where
        self.operation = operation
        self.model = model
        self.seconds = seconds
        self.setting = setting

    def __enter__(self) -> Translate:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if not isinstance(exc, Exception) or isinstance(exc, LLMError):
            return False  # includes CancelledError and GeneratorExit: those pass untouched
        mapped = translate(exc, self.where, self.operation, self.model, self.seconds, self.setting)
        if mapped is None:
            return False
        raise mapped from exc


def translate(
    exc: Exception,
    where: Where,
    operation: str,
    model: str | None,
    seconds: float,
    setting: str | None = TIMEOUT_SETTING,
) -> LLMError | None:
    """The :class:`LLMError` for a client, HTTP or timeout exception; None for anything else
    (a bug, raised as it is)."""
    host, role = where.host, where.role
    if isinstance(exc, httpx.ConnectTimeout):
        return OllamaUnreachable(host, f"no answer within {where.connect_timeout:g} s", role)
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return OllamaTimeout(host, operation, seconds, role, setting)
    if isinstance(exc, RefusedReply):
        server = (
            f"the embedding host {host}" if role == EMBEDDING else f"the model server at {host}"
        )
        return OllamaError(f"{server} sent a {exc} during {operation} — is it an Ollama server?")
    if isinstance(exc, ConnectionError | httpx.ConnectError):
        return OllamaUnreachable(host, _connect_reason(exc), role)
    if isinstance(exc, where.response_error):
        return _server_error(exc, where, operation, model)
    if isinstance(exc, httpx.HTTPStatusError):
        code = exc.response.status_code
        return OllamaError(
            f"{host} answered HTTP {code} to {operation} — is it an Ollama server?", code
        )
    if isinstance(exc, httpx.TransportError):
        detail = one_line(str(exc) or type(exc).__name__, 120)
        return OllamaError(
            f"lost the connection to Ollama at {host} during {operation} ({detail})"
            " — is it still running?"
        )
    if isinstance(exc, ValueError) and getattr(exc, "title", "Response").endswith("Response"):
        # A reply that is not JSON or lacks required fields. (A pydantic error about any
        # other model, e.g. Message, is the caller's own malformed input: a bug.)
        return OllamaError(
            f"Ollama at {host} sent a malformed reply to {operation} ({_malformed(exc)})"
            " — is it an Ollama server, and up to date?"
        )
    if isinstance(exc, RecursionError):  # the client parsing a reply nested without end
        return OllamaError(
            f"Ollama at {host} sent a malformed reply to {operation}: JSON nested too deeply"
        )
    return None


def _malformed(exc: ValueError) -> str:
    """What was wrong in the reply, in words: a field and its problem, not pydantic's dump
    ("1 validation error for ChatResponse ... [type=string_type, input_value=123, ...")."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            first = errors(include_url=False, include_input=False)[0]
            where = ".".join(str(part) for part in first.get("loc", ())) or "the reply"
            return one_line(f"{where}: {first.get('msg', 'not valid')}", 120)
    return one_line(str(exc), 120)


def _server_error(exc: Any, where: Where, operation: str, model: str | None) -> LLMError:
    message = one_line(str(exc.error), 240)
    lowered = message.lower()
    status = exc.status_code
    if model and "does not support tools" in lowered:
        return ToolsUnsupported(model)
    if model and status == 404 and "not found" in lowered and "model" in lowered:
        return ModelMissing(model, where.host, where.role)
    if status == -1:  # an {"error": ...} line in the middle of a stream
        return OllamaError(f"Ollama failed during {operation}: {message}")
    if lowered.startswith(("<!doctype", "<html", "<?xml")):  # a web server, not Ollama
        return OllamaError(
            f"{where.host} sent a web page (HTTP {status}) in answer to {operation}"
            " — is it an Ollama server?",
            status,
        )
    return OllamaError(f"Ollama refused {operation}: {message} (HTTP {status})", status)


def _connect_reason(exc: BaseException) -> str:
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "connection refused"
    if any(isinstance(e, socket.gaierror) for e in chain):
        return "unknown host name"
    blob = " ".join(str(e) for e in chain).lower()
    if "refused" in blob:
        return "connection refused"
    if any(s in blob for s in ("name or service", "nodename nor servname", "getaddrinfo")):
        return "unknown host name"
    if "unreachable" in blob:
        return "network unreachable"
    return "connection failed"
