"""The model-server layer: chat, structured output and embeddings through a local Ollama.

Importing this package is light (stdlib only): errors and event types come at once, while
``OllamaBackend`` (which pulls in ``ollama``, pydantic and httpx) loads on first access.
Only :mod:`navi_desktop.llm.backend` imports ``ollama``; a test checks it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from navi_desktop.llm.errors import (
    InvalidModelOutput,
    LLMError,
    ModelMissing,
    OllamaError,
    OllamaTimeout,
    OllamaUnreachable,
    ToolLoopLimit,
    ToolsUnsupported,
)
from navi_desktop.llm.types import (
    DEFAULT_HOST,
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
    ToolResult,
    resolve_host,
)

if TYPE_CHECKING:
    from navi_desktop.llm.backend import OllamaBackend

__all__ = [
    "DEFAULT_HOST",
    "ChatEvent",
    "ContentDelta",
    "Done",
    "Embeddings",
    "Health",
    "InvalidModelOutput",
    "LLMError",
    "ModelInfo",
    "ModelMissing",
    "OllamaBackend",
    "OllamaError",
    "OllamaTimeout",
    "OllamaUnreachable",
    "PullProgress",
    "ThinkingDelta",
    "ToolCall",
    "ToolCallsRequested",
    "ToolLoopLimit",
    "ToolResult",
    "ToolsUnsupported",
    "resolve_host",
]


def __getattr__(name: str) -> Any:
    if name == "OllamaBackend":
        from navi_desktop.llm.backend import OllamaBackend

        return OllamaBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
