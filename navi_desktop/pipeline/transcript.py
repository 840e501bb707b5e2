"""A session's messages as the text an extraction model reads, split into chunks."""

from __future__ import annotations

import json
from collections.abc import Sequence

from navi_desktop.memory.models import Message

TOOL_RESULT_LIMIT = 800  # characters of a tool result kept in the transcript
# Characters of a reply kept (its start and end): facts come from the user's own words, and a
# long reply only dilutes them (and tempts a small model to quote it).
ASSISTANT_LIMIT = 600
CHUNK_CHARS = 12_000  # about 3,000 tokens: leaves room in a small model's context


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


def chunks(lines: list[tuple[int, str]], limit: int = CHUNK_CHARS) -> list[list[tuple[int, str]]]:
    """Consecutive groups of whole lines under ``limit`` characters; a single longer line is
    its own chunk. Nothing is dropped."""
    out: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] = []
    size = 0
    for item in lines:
        length = len(item[1]) + 1
        if current and size + length > limit:
            out.append(current)
            current, size = [], 0
        current.append(item)
        size += length
    if current:
        out.append(current)
    return out
