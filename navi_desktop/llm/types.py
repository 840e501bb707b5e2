"""Plain data for the LLM layer: stream events, model descriptions, host resolution.

Stdlib only, so the TUI and the daemon protocol can use these without importing ``ollama``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Host resolution, re-exported: it lives in navi_desktop.ollama_host, which the CLI loads
# without this layer.
from navi_desktop.ollama_host import DEFAULT_HOST as DEFAULT_HOST
from navi_desktop.ollama_host import DEFAULT_PORT as DEFAULT_PORT
from navi_desktop.ollama_host import resolve_host as resolve_host

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
