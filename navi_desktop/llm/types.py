"""Plain data for the LLM layer: stream events, model descriptions, host resolution.

Stdlib only, so the TUI and the daemon protocol can use these without importing ``ollama``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_HOST = "http://127.0.0.1:11434"
DEFAULT_PORT = 11434

# Addresses a server listens on but a client cannot usefully connect to.
_UNSPECIFIED = {"0.0.0.0": "127.0.0.1", "::": "::1"}


def resolve_host(host: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The base URL to connect to: ``host``, else ``OLLAMA_HOST``, else the local default.

    Accepts what Ollama's own tools accept: ``127.0.0.1:11434``, ``example.com``,
    ``http://host:port``, ``https://host/path``, ``[::1]:11434``. A bare host gets port
    11434; ``http://`` / ``https://`` without a port mean 80 / 443, as in the ``ollama`` CLI.
    A listen-all address (``0.0.0.0``, ``::``) connects to loopback.
    """
    env = os.environ if environ is None else environ
    raw = (host or "").strip() or env.get("OLLAMA_HOST", "").strip()
    if not raw:
        return DEFAULT_HOST
    scheme, sep, rest = raw.partition("://")
    port = DEFAULT_PORT
    if not sep:
        scheme, rest = "http", raw
    elif scheme == "https":
        port = 443
    elif scheme == "http":
        port = 80
    split = urllib.parse.urlsplit(f"{scheme}://{rest}")
    name = split.hostname or "127.0.0.1"
    with contextlib.suppress(ValueError):  # a port that is not a number: keep the default
        port = split.port or port
    name = _UNSPECIFIED.get(name, name)
    try:
        if isinstance(ipaddress.ip_address(name), ipaddress.IPv6Address):
            name = f"[{name}]"
    except ValueError:
        pass
    path = split.path.strip("/")
    return f"{scheme}://{name}:{port}" + (f"/{path}" if path else "")


# ---- model descriptions -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Health:
    """The result of a connection test; never raises, ``error`` says what is wrong."""

    reachable: bool
    host: str
    version: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One installed model, as listed by ``/api/tags``."""

    name: str
    size: int
    digest: str
    family: str | None = None
    parameter_size: str | None = None
    quantization: str | None = None


@dataclass(frozen=True, slots=True)
class Embeddings:
    """Vectors for a batch of texts, with the model and dimension they came from."""

    model: str
    dim: int
    vectors: list[list[float]]


@dataclass(frozen=True, slots=True)
class PullProgress:
    """One progress line of ``ollama pull``; ``completed``/``total`` are bytes of one layer."""

    status: str
    completed: int | None = None
    total: int | None = None
    digest: str | None = None

    @property
    def fraction(self) -> float | None:
        if self.total and self.completed is not None:
            return min(1.0, self.completed / self.total)
        return None


# ---- chat stream events -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """A piece of the visible reply."""

    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """A piece of the model's reasoning (models with ``thinking``, when ``think`` is on)."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallsRequested:
    """The model asks for these tools to be run."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool ran (``chat_with_tools`` only); ``is_error`` when it raised."""

    call: ToolCall
    content: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Done:
    """The end of one model reply, with Ollama's counts (tokens) and durations (ns).

    ``final`` is False for a ``chat_with_tools`` round that ended in tool calls: more follows.
    ``content`` / ``thinking`` / ``tool_calls`` are the whole round, assembled.
    """

    model: str
    done_reason: str | None = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_duration: int | None = None
    eval_duration: int | None = None
    content: str = ""
    thinking: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    final: bool = True


ChatEvent = ContentDelta | ThinkingDelta | ToolCallsRequested | ToolResult | Done
