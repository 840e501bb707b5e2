"""Session summaries and the profile summary: written by the model, kept only when grounded.

A summary is injected into later prompts where no evidence check guards it, so it is held to
its sources: sentences on sensitive matters or stating what waits for the user's review are
left out, and a summary whose content words do not come from the conversation (or, for the
profile, the facts) is not stored; an extractive fallback is, which the model cannot invent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from navi_desktop.errors import NaviError
from navi_desktop.memory.documents import memory_text
from navi_desktop.pipeline.extraction import (
    MERGE_SCHEMA,
    SUMMARY_MERGE_PROMPT,
    WRITE_OPTIONS,
    JsonModel,
    request,
)
from navi_desktop.pipeline.grounding import (
    check_summary,
    content_words,
    key_sentences,
    sensitive,
)

if TYPE_CHECKING:
    from navi_desktop.memory.models import Memory

log = logging.getLogger(__name__)
RETRYABLE = (NaviError, OSError, TimeoutError)  # what can go wrong talking to a model
PROFILE_FALLBACK_CHARS = 600


class _Settings(Protocol):
    model: str
    options: dict | None


class _Report(Protocol):
    llm_calls: int
    notes: list[str]


async def ask_field(
    llm: JsonModel,
    settings: _Settings,
    instructions: str,
    material: str,
    schema: dict,
    options: dict | None = None,
) -> Any:
    """One structured request for a schema of one required field: that field's value, or None
    when the answer is not an object."""
    (name,) = schema["required"]
    merged = {**(options or WRITE_OPTIONS), **(settings.options or {})}
    answer = await llm.complete_json(
        settings.model, request(instructions, material), schema, merged
    )
    return answer.get(name) if isinstance(answer, dict) else None


async def session_summary(
    llm: JsonModel,
    settings: _Settings,
    report: _Report,
    parts: Sequence[str],
    *,
    sources: Sequence[str],
    user_texts: Sequence[str],
    withheld: Sequence[str] = (),
    merge: bool = True,
) -> str | None:
    """One summary from the chunks' summaries (merged by the model when there are several
    and ``merge``), checked; the user's key sentences when it fails the checks; None when the
    model wrote none. A failed merge is not a failed session: the fallback takes its place."""
    texts = [p for p in parts if p.strip()]
    if not texts:
        return None
    candidate: Any = texts[0]
    if len(texts) > 1:
        candidate = None
        if merge:
            report.llm_calls += 1
            listing = "\n\n".join(f"Part {i}: {t}" for i, t in enumerate(texts, start=1))
            try:
                candidate = await ask_field(
                    llm, settings, SUMMARY_MERGE_PROMPT, listing, MERGE_SCHEMA
                )
            except RETRYABLE as exc:
                report.notes.append(f"summary: merging the parts failed ({exc})")
    if isinstance(candidate, str) and candidate.strip():
        text, notes = check_summary(candidate, sources, withheld)
        report.notes += [f"summary: {n}" for n in notes]
        if text and content_words(text):
            return text
        if text:  # "The user loves me.": nothing to find it by, nothing to learn from
            report.notes.append("summary: it says nothing about the conversation")
    fallback = key_sentences(user_texts, withheld)
    if fallback:
        report.notes.append("summary: the user's own sentences were kept instead")
    return fallback


def profile_sources(facts: Sequence[Memory]) -> list[str]:
    return [f"{memory_text(m)} {m.evidence or ''}" for m in facts]


def checked_profile(text: str, facts: Sequence[Memory]) -> tuple[str | None, list[str]]:
    """The model's profile when grounded in the facts (sensitive sentences left out), else
    a plain one built from the facts themselves."""
    kept, notes = check_summary(text, profile_sources(facts))
    if kept:
        return kept, notes
    return profile_fallback(facts), [*notes, "profile: built from the facts instead"]


def profile_fallback(facts: Sequence[Memory]) -> str | None:
    """The strongest facts as plain sentences, sensitive ones left out."""
    lines: list[str] = []
    used = 0
    for m in facts:
        line = memory_text(m).rstrip(".") + "."
        if m.category in ("health", "relationships") or sensitive(line):
            continue
        if used + len(line) > PROFILE_FALLBACK_CHARS:
            break
        lines.append(line[:1].upper() + line[1:])
        used += len(line) + 1
    return " ".join(lines) or None
