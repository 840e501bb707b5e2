"""A transcript cut into chunks that fit the model: sized in tokens from the model's own
context, a message longer than a chunk split into parts, and for each chunk the watermark
that may be recorded once it is learned from (so a later failure keeps the earlier chunks).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from navi_desktop.llm.budget import estimate_tokens

Line = tuple[int, str]  # (message id, transcript line)

DEFAULT_CONTEXT = 4096  # what Ollama gives a model when nobody says otherwise
MAX_CHUNK_TOKENS = 2000  # small models lose track in longer transcripts even when they fit
MIN_CHUNK_TOKENS = 200
MARGIN = 64
MAX_ATTEMPT_SHRINK = 3  # retries halve the chunk size up to this many times


@dataclass(frozen=True)
class Chunk:
    lines: list[Line]
    upto: int | None  # the watermark once this chunk is learned from; None: do not move it

    @property
    def text(self) -> str:
        return "\n".join(t for _, t in self.lines)

    @property
    def first_id(self) -> int:
        return self.lines[0][0]


def chunk_tokens(
    context_length: int | None, instruction_tokens: int, output_tokens: int, attempt: int = 0
) -> int:
    """How many transcript tokens one request may carry: the model's context less the
    instructions and room for the answer, at most ``MAX_CHUNK_TOKENS``; halved for each
    failed attempt before (a retry is a different request, not the same one again)."""
    room = (context_length or DEFAULT_CONTEXT) - instruction_tokens - output_tokens - MARGIN
    size = min(MAX_CHUNK_TOKENS, room) // 2 ** min(attempt, MAX_ATTEMPT_SHRINK)
    return max(MIN_CHUNK_TOKENS, size)


def plan_chunks(
    lines: list[Line], limit: int, size: Callable[[str], int] = estimate_tokens
) -> list[Chunk]:
    """Consecutive groups of lines of at most ``limit`` (by ``size``); a line over the limit
    is split into parts at sentence or word boundaries. Nothing is dropped."""
    pieces: list[Line] = []
    for message_id, text in lines:
        if size(text) + 1 <= limit:
            pieces.append((message_id, text))
        else:
            pieces += [(message_id, part) for part in _split_line(text, limit, size)]
    groups: list[list[Line]] = []
    current: list[Line] = []
    used = 0
    for piece in pieces:
        cost = size(piece[1]) + 1
        if current and used + cost > limit:
            groups.append(current)
            current, used = [], 0
        current.append(piece)
        used += cost
    if current:
        groups.append(current)
    out = []
    done: int | None = None
    for n, group in enumerate(groups):
        last = group[-1][0]
        continues = n + 1 < len(groups) and groups[n + 1][0][0] == last
        if not continues:
            done = last
        else:  # the last message goes on in the next chunk: only the ones before it are done
            earlier = [mid for mid, _ in group if mid != last]
            done = max([*earlier, done or 0]) or done
        out.append(Chunk(group, done))
    return out


_BREAK = re.compile(r"(?<=[.!?。！？\n])\s+|\s+")


def _split_line(text: str, limit: int, size: Callable[[str], int]) -> list[str]:
    """Parts of one long line, each labelled with its speaker, each within ``limit``."""
    label, sep, body = text.partition(": ")
    if not sep or len(label) > 60:
        label, body = "", text
    room = max(20, limit - size(label) - 8)
    parts: list[str] = []
    current = ""
    for word in _words(body):
        if current and size(current + word) > room:
            parts.append(current.strip())
            current = ""
        while size(word) > room:  # a run without spaces (a hash, CJK text): cut it
            cut = max(1, len(word) * room // max(1, size(word)))
            parts.append(word[:cut])
            word = word[cut:]
        current += word
    if current.strip():
        parts.append(current.strip())
    if not label:
        return parts
    total = len(parts)
    return [f"{label} (part {i} of {total}): {p}" for i, p in enumerate(parts, start=1)]


def _words(text: str) -> list[str]:
    """``text`` as pieces that keep their trailing space, so joining them gives it back."""
    out, start = [], 0
    for match in _BREAK.finditer(text):
        out.append(text[start : match.end()])
        start = match.end()
    if start < len(text):
        out.append(text[start:])
    return out
