"""A session's messages as the text an extraction model reads (chunked in :mod:`.chunking`)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from navi_desktop.memory.models import Message

TOOL_RESULT_LIMIT = 800  # characters of a tool result kept in the transcript
# Characters of a reply kept (its start and end): facts come from the user's own words, and a
# long reply only dilutes them (and tempts a small model to quote it).
ASSISTANT_LIMIT = 600


def transcript_lines(messages: Sequence[Message]) -> list[tuple[int, str]]:
    """(message id, line) pairs: ``User:``, ``Assistant:``, ``[Tool call]``, ``[Tool result]``."""
    lines: list[tuple[int, str]] = []
    for m in messages:
        meta = m.meta or {}
        if m.role == "user":
            lines.append((m.id, f"User: {m.content}"))
        elif m.role == "assistant":
            if m.content.strip():
                lines.append((m.id, f"Assistant: {_shorten(m.content, ASSISTANT_LIMIT)}"))
            for call in meta.get("tool_calls", []):
                args = json.dumps(call.get("arguments", {}), ensure_ascii=False)
                lines.append((m.id, f"[Tool call] {call.get('name', '?')}({args})"))
        elif m.role == "tool":
            text = m.content
            if len(text) > TOOL_RESULT_LIMIT:
                text = text[:TOOL_RESULT_LIMIT] + f" … [{len(m.content) - TOOL_RESULT_LIMIT} more]"
            lines.append((m.id, f"[Tool result] {m.name or 'tool'}: {text}"))
    return lines


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} … [{len(text) - 2 * half} more] … {text[-half:]}"
