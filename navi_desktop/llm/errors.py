"""Errors from talking to a local model, each one line that names the cause and the fix.

Stdlib only: the TUI and the daemon protocol can import these without the ``ollama`` client.
``kind`` is a stable machine-readable name for sending an error across the daemon socket.
"""

from __future__ import annotations

from navi_desktop.errors import NaviError

_START_HINT = "start it with `ollama serve`, or set the host in settings / OLLAMA_HOST"
_EMBED_HINT = (
    "start Ollama there (for other machines: `OLLAMA_HOST=0.0.0.0 ollama serve`), or change"
    " ollama.embedding_host in settings / NAVI_EMBEDDING_HOST"
)
EMBEDDING = "embedding"  # the role of a backend that only embeds, on a host of its own


def one_line(text: str, limit: int = 200) -> str:
    """Collapse whitespace and cut ``text`` to ``limit`` characters (with an ellipsis)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class LLMError(NaviError):
    """Base class: anything that stopped a call to the local model server."""

    kind = "llm_error"


class OllamaUnreachable(LLMError):
    """Nothing answers at the configured host (refused, unknown name, connect timeout).
    ``role`` "embedding": the separate host that embeds, named as such."""

    kind = "ollama_unreachable"

    def __init__(self, host: str, reason: str = "connection refused", role: str = "") -> None:
        self.host = host
        self.reason = reason
        self.role = role
        if role == EMBEDDING:
            super().__init__(f"embedding host {host} unreachable: {reason} — {_EMBED_HINT}")
        else:
            super().__init__(f"cannot reach Ollama at {host}: {reason} — {_START_HINT}")


class ModelMissing(LLMError):
    """The model is not installed on the server."""

    kind = "model_missing"

    def __init__(self, model: str, host: str = "", role: str = "") -> None:
        self.model = model
        if role == EMBEDDING:  # the pull must happen on that machine
            super().__init__(
                f"model '{model}' is not installed on the embedding host {host} — run"
                f" `OLLAMA_HOST={host} ollama pull {model}`"
            )
        else:
            super().__init__(f"model '{model}' is not installed — run `ollama pull {model}`")


class ToolsUnsupported(LLMError):
    """The model cannot call tools; the caller chats without memory tools instead."""

    kind = "tools_unsupported"

    def __init__(self, model: str) -> None:
        self.model = model
        super().__init__(
            f"model '{model}' cannot call tools — chatting without memory tools; "
            "choose a model with tool support (e.g. qwen3, llama3.1) to use them"
        )


# The settings that hold the backend's waits (config.OllamaSettings).
TIMEOUT_SETTING = "ollama.timeout_s"
BACKGROUND_TIMEOUT_SETTING = "ollama.background_timeout_s"


class OllamaTimeout(LLMError):
    """The server took longer than the configured limit. ``setting``: the one that holds
    that limit; None for a fixed one (a version or model check, which should answer at once)."""

    kind = "ollama_timeout"

    def __init__(
        self,
        host: str,
        operation: str,
        seconds: float,
        role: str = "",
        setting: str | None = TIMEOUT_SETTING,
    ) -> None:
        self.host = host
        self.operation = operation
        self.seconds = seconds
        self.setting = setting
        where = f"embedding host {host}" if role == EMBEDDING else f"Ollama at {host}"
        fix = (
            f"the model may still be loading or the machine is busy; try again, or raise"
            f" {setting} in settings"
            if setting
            else "the server is busy or stuck; try again, or restart it"
        )
        super().__init__(f"{where} timed out after {seconds:g} s during {operation} — {fix}")


class OllamaError(LLMError):
    """Any other error the server reported; the message carries the server's own words."""

    kind = "ollama_error"

    def __init__(self, message: str, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(one_line(message, 300))


class InvalidModelOutput(LLMError):
    """Structured output that does not parse as JSON or does not match the schema."""

    kind = "invalid_model_output"

    def __init__(self, model: str, problem: str, output: str) -> None:
        self.model = model
        self.problem = problem
        self.output = output
        excerpt = one_line(output, 80) or "(empty)"
        super().__init__(
            f"model '{model}' returned {one_line(problem, 120)}: {excerpt!r} — "
            "try again, or choose a larger model"
        )


class PromptTooLong(LLMError):
    """A request that leaves no room for the answer in the model's context."""

    kind = "prompt_too_long"
    words = (
        "the request needs about {prompt} tokens but the model's context holds"
        " {context_length} — it is retried in smaller parts; or choose a model with a longer"
        " context"
    )

    def __init__(self, prompt: int, context_length: int) -> None:
        self.prompt = prompt
        self.context_length = context_length
        super().__init__(self.words.format(prompt=prompt, context_length=context_length))


class MessageTooLong(PromptTooLong):
    """A chat prompt whose instructions and last message alone exceed the model's context:
    the server would cut it from the front (the instructions first), silently."""

    kind = "message_too_long"
    words = (
        "the message and Navi's instructions need about {prompt:,} tokens, and the chat"
        " model's context holds {context_length:,}: send a shorter message (or split it),"
        " or choose a model with a longer context (ollama.chat_model in settings)"
    )


class ToolLoopLimit(LLMError):
    """The model kept asking for tools past the round limit."""

    kind = "tool_loop_limit"

    def __init__(self, model: str, rounds: int) -> None:
        self.model = model
        self.rounds = rounds
        super().__init__(
            f"model '{model}' was still calling tools after {rounds} rounds — stopped; "
            "rephrase the request or ask for one thing at a time, or choose another chat model"
            " (ollama.chat_model) in settings"
        )
