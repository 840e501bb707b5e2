"""The session-end seam: one function, whatever the trigger (inactivity, shutdown, explicit
end, a newer session starting, start-up recovery).

Idempotent: it processes the messages after the session's watermark only, so a second call
does nothing and a session that continued later is processed from where it stopped.
A failure (server down, timeout, invalid output) leaves the session pending with its reason,
writes nothing, and is retried later with backoff.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import NaviError
from navi_desktop.memory.documents import memory_text
from navi_desktop.memory.facts import NewMemory
from navi_desktop.memory.sessions import SessionWrite
from navi_desktop.pipeline.extraction import (
    EXTRACTION_SCHEMA,
    MERGE_SCHEMA,
    PROFILE_PROMPT,
    PROFILE_SCHEMA,
    SUMMARY_MERGE_PROMPT,
    Extraction,
    FactCandidate,
    JsonModel,
    ModelOutputError,
    extraction_messages,
    parse_extraction,
    request,
)
from navi_desktop.pipeline.policy import Conversation, squash
from navi_desktop.pipeline.reconcile import Planned, Similarity, plan
from navi_desktop.pipeline.transcript import CHUNK_CHARS, chunks, transcript_lines

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore

log = logging.getLogger(__name__)
# What can go wrong talking to a model; anything else is a bug and is raised.
RETRYABLE = (NaviError, OSError, TimeoutError)


@dataclass(frozen=True)
class EndSettings:
    model: str
    chunk_chars: int = CHUNK_CHARS
    similarity: Similarity = field(default_factory=Similarity)
    options: dict | None = None  # passed to the model (e.g. temperature)


@dataclass
class EndReport:
    session_id: str
    status: str  # "nothing", "processed" or "pending"
    reason: str | None = None
    learned: dict[str, list[int]] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    summary_id: int | None = None
    profile_updated: bool = False
    llm_calls: int = 0


async def end_session(
    store: MemoryStore, llm: JsonModel, session_id: str, settings: EndSettings
) -> EndReport:
    report = EndReport(session_id, "nothing")
    messages = await store.unprocessed_messages(session_id)
    if not messages:
        return report
    lines = transcript_lines(messages)
    if not lines:  # only system messages: nothing to learn, move the watermark
        await store.commit_session(session_id, messages[-1].id, [], None)
        return report
    conversation = Conversation.of(
        "\n".join(text for _, text in lines), (m.content for m in messages if m.role == "user")
    )
    try:
        parts = []
        for chunk in chunks(lines, settings.chunk_chars):
            text = "\n".join(t for _, t in chunk)
            report.llm_calls += 1
            answer = await llm.complete_json(
                settings.model, extraction_messages(text), EXTRACTION_SCHEMA, settings.options
            )
            parts.append(parse_extraction(answer))
        summary = await _summary(llm, parts, settings, report)
        merged = Extraction(
            [f for p in parts for f in p.facts], [r for p in parts for r in p.rules], summary
        )
        planned = await plan(store, merged, conversation=conversation, sim=settings.similarity)
    except RETRYABLE as exc:
        reason = str(exc) or type(exc).__name__
        log.warning("session %s left pending: %s", session_id, reason)
        await store.mark_pending(session_id, reason)
        return EndReport(session_id, "pending", reason=reason, llm_calls=report.llm_calls)

    quoted = [(m.id, squash(m.content)) for m in messages]
    writes = [w for p in planned if (w := _write(p, session_id, quoted)) is not None]
    report.dropped = [f"{_label(p)}: {p.reason}" for p in planned if p.action == "drop"]
    commit = await store.commit_session(
        session_id, messages[-1].id, writes, summary or None, first_message_id=messages[0].id
    )
    report.status = "processed"
    report.learned = commit.ids
    report.summary_id = commit.summary_id
    if commit.facts_changed:
        report.profile_updated = await refresh_profile(store, llm, settings, report)
    return report


async def _summary(
    llm: JsonModel, parts: list[Extraction], settings: EndSettings, report: EndReport
) -> str:
    texts = [p.summary for p in parts if p.summary]
    if len(texts) <= 1:
        return texts[0] if texts else ""
    report.llm_calls += 1
    parts_text = "\n\n".join(f"Part {i}: {t}" for i, t in enumerate(texts, start=1))
    summary = await ask_field(llm, settings, SUMMARY_MERGE_PROMPT, parts_text, MERGE_SCHEMA)
    if not isinstance(summary, str):
        raise ModelOutputError('summary merge must return {"summary": string}')
    return summary.strip()


async def ask_field(
    llm: JsonModel, settings: EndSettings, instructions: str, material: str, schema: dict
) -> Any:
    """One structured request for a schema of one required field: that field's value, or None
    when the answer is not an object."""
    (name,) = schema["required"]
    answer = await llm.complete_json(
        settings.model, request(instructions, material), schema, settings.options
    )
    return answer.get(name) if isinstance(answer, dict) else None


async def refresh_profile(
    store: MemoryStore, llm: JsonModel, settings: EndSettings, report: EndReport | None = None
) -> bool:
    """Rewrite the profile summary from stored facts only. A failure keeps it marked stale
    (it is retried later); the session's memories are already safe."""
    facts, _ = await store.list_memories(kind="fact", sort="strength", limit=200)
    if not facts:
        return False
    listing = "\n".join(f"- [{m.category or 'other'}] {memory_text(m)}" for m in facts)
    try:
        if report is not None:
            report.llm_calls += 1
        text = await ask_field(llm, settings, PROFILE_PROMPT, f"Facts:\n{listing}", PROFILE_SCHEMA)
        if not isinstance(text, str) or not text.strip():
            raise ModelOutputError('profile must return {"profile": non-empty string}')
    except RETRYABLE as exc:
        log.warning("profile summary left stale: %s", exc)
        return False
    await store.set_profile_summary(text.strip())
    return True


def _label(p: Planned) -> str:
    c = p.candidate
    return f"{c.key}: {c.value}" if isinstance(c, FactCandidate) else c.instruction


def _write(p: Planned, session_id: str, quoted: list[tuple[int, str]]) -> SessionWrite | None:
    if p.action == "drop":
        return None
    span = _span(p.candidate.evidence, quoted)
    if isinstance(p.candidate, FactCandidate):
        c = p.candidate
        memory = NewMemory(
            value=c.value,
            kind="fact",
            category=c.category,
            subject=c.subject,
            key=c.key,
            evidence=c.evidence,
            source=c.source,
            confidence=c.confidence,
            session_id=session_id,
            message_from=span,
            message_to=span,
        )
    else:
        memory = NewMemory(
            value=p.candidate.instruction,
            kind="rule",
            evidence=p.candidate.evidence,
            source="conversation",
            session_id=session_id,
            message_from=span,
            message_to=span,
        )
    if p.action in ("hold", "repeat"):
        memory.status = "held"
        memory.review_reason = p.reason  # for "repeat", AWAITING_REPEAT: the store promotes it
        return SessionWrite("hold", memory)
    action = "strengthen" if p.action == "strengthen" else "add"
    return SessionWrite(action, memory, p.target_id)


def _span(evidence: str, quoted: list[tuple[int, str]]) -> int | None:
    """The id of the message the evidence quote comes from (``quoted``: ids and squashed text)."""
    quote = squash(evidence)
    if quote:
        for message_id, text in quoted:
            if quote in text:
                return message_id
    return None
