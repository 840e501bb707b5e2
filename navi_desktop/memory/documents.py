"""What the search indexes see for a memory or a message (one place, so indexing and
re-indexing after an edit or a migration always agree)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from navi_desktop.memory.models import Memory
from navi_desktop.memory.textproc import segment

Row = Mapping[str, Any]


def memory_text(row: Row | Memory) -> str:
    """One line of plain text for a memory, as shown to a model and embedded."""
    get = (lambda k: getattr(row, k)) if isinstance(row, Memory) else row.__getitem__
    if get("kind") != "fact":
        return str(get("value"))
    subject = get("subject") or "user"
    key = (get("key") or "").replace("_", " ")
    return f"{subject} {key}: {get('value')}" if key else f"{subject}: {get('value')}"


def memory_document(row: Row) -> tuple[str, str]:
    """(text, evidence) columns of memories_fts."""
    return segment(memory_text(row)), segment(row["evidence"] or "")


def spoken_date(iso: str) -> str:
    """'2023-05-08T13:56:00Z' -> '8 May 2023', so dates can be searched in words."""
    try:
        when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return ""
    return f"{when.day} {when:%B %Y}"


def message_text(row: Row) -> str:
    """A message as indexed and embedded: a dated sentence saying who said what.

    Embedding models retrieve a natural sentence far better than a "Speaker: text" line, and
    the date lets questions about time find it (measured on LoCoMo, see benchmarks/).
    """
    speaker = row["name"] or row["role"]
    date = spoken_date(row["created_at"])
    return (
        f'({date}) {speaker} said, "{row["content"]}"'
        if date
        else f'{speaker} said, "{row["content"]}"'
    )


def message_documents(row: Row, previous: Row | None) -> tuple[str, str]:
    """(body, context) columns of messages_fts. The previous turn is context: an answer is
    often only findable through the question it answers."""
    context = f"{previous['name'] or previous['role']}: {previous['content']}" if previous else ""
    return segment(message_text(row)), segment(context)


def text_digest(text: str) -> str:
    """What a vector was made from, kept beside it: a changed text's old vector is stale."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
