"""The session-end seam: one function, whatever the trigger (inactivity, shutdown, explicit
end, a newer session starting, start-up recovery).

Idempotent: it processes the messages after the session's watermark only, so a second call
does nothing and a session that continued later is processed from where it stopped.
The transcript goes to the model in chunks sized to its context; each chunk's candidates are
checked one by one (a malformed or unsupported one is dropped with its reason) and committed
with that chunk's watermark, so a later failure keeps what earlier chunks taught. A failure
(server down, timeout, nothing usable in an answer) leaves the session pending with its
reason, and the retry sends smaller chunks: a different request, not the same one again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

from navi_desktop.errors import DiskError, DiskFull
from navi_desktop.llm.budget import output_tokens, prompt_tokens
from navi_desktop.memory.clock import parse_iso
from navi_desktop.memory.documents import memory_text
from navi_desktop.memory.facts import NewMemory
from navi_desktop.memory.sessions import SessionWrite
from navi_desktop.memory.textproc import normalize, normalize_key
from navi_desktop.pipeline.chunking import Chunk, chunk_tokens, plan_chunks
from navi_desktop.pipeline.extraction import (
    EXTRACT_OPTIONS,
    EXTRACTION_SCHEMA,
    PROFILE_PROMPT,
    PROFILE_SCHEMA,
    Extraction,
    FactCandidate,
    JsonModel,
    ModelOutputError,
    Parsed,
    expiry_problem,
    extraction_messages,
    parse_extraction,
)
from navi_desktop.pipeline.grounding import Transcript, check_candidate
from navi_desktop.pipeline.policy import Conversation, squash
from navi_desktop.pipeline.reconcile import Planned, Similarity, plan
from navi_desktop.pipeline.summaries import (
    RETRYABLE,
    ask_field,
    checked_profile,
    session_summary,
)
from navi_desktop.pipeline.transcript import transcript_lines

if TYPE_CHECKING:
    from navi_desktop.memory.models import Message
    from navi_desktop.memory.store import MemoryStore

log = logging.getLogger(__name__)
__all__ = ["RETRYABLE", "EndReport", "EndSettings", "ask_field", "end_session", "refresh_profile"]
GIVE_UP_AFTER = 3  # failed attempts after which an answer with nothing usable is accepted
Progress = Callable[[int, int], None]  # (chunk being processed, chunks in all)


@dataclass(frozen=True)
class EndSettings:
    model: str
    # A fixed chunk size in characters (tests, tuning); None: sized in tokens to the model.
    chunk_chars: int | None = None
    similarity: Similarity = field(default_factory=Similarity)
    options: dict | None = None  # passed to the model over the defaults (e.g. temperature)
    progress: Progress | None = None


@dataclass
class EndReport:
    session_id: str
    status: str  # "nothing", "processed" or "pending"
    reason: str | None = None
    learned: dict[str, list[int]] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # "what: why", one per candidate
    offered: int = 0  # candidates the model proposed
    notes: list[str] = field(default_factory=list)  # summaries left out or replaced, and why
    summary_id: int | None = None
    profile_updated: bool = False
    llm_calls: int = 0
    chunks: int = 0

    def learn(self, ids: dict[str, list[int]]) -> None:
        for action, new in ids.items():
            self.learned.setdefault(action, []).extend(new)


async def end_session(
    store: MemoryStore, llm: JsonModel, session_id: str, settings: EndSettings
) -> EndReport:
    # Two machines' daemons may end the same session on a shared server: one processes it,
    # the other leaves it (its commit would find the work done anyway; this saves the model
    # calls).
    async with store.processing(session_id) as mine:
        if not mine:
            return EndReport(session_id, "nothing", "another daemon is processing it")
        return await _end_session(store, llm, session_id, settings)


async def _end_session(
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
    run = _Run(store, llm, settings, report, messages)
    conversation = Conversation.of(
        "\n".join(text for _, text in lines),
        (m.content for m in messages if m.role == "user"),
        (m.content for m in messages if m.role == "tool"),  # never the user's instructions
    )
    said = Transcript.of(messages)
    times = {m.id: m.created_at for m in messages}  # when each was said: expiries count from it
    attempt = await store.session_attempts(session_id)
    chunks = await _chunks(llm, settings, lines, attempt)
    report.chunks = len(chunks)
    seen: set[tuple[str, ...]] = set()  # candidates planned in an earlier chunk of this run
    facts_changed = False
    for n, chunk in enumerate(chunks, start=1):
        if settings.progress is not None:
            settings.progress(n, len(chunks))
        try:
            parsed = await _extract(llm, settings, chunk, report, _day(times, chunk))
            if not parsed.usable and attempt < GIVE_UP_AFTER:
                raise ModelOutputError(
                    "nothing usable in the model's answer: " + "; ".join(parsed.dropped[:3])
                )
            kept = _grounded(parsed, said, report, seen, times)
            planned = await plan(store, kept, conversation=conversation, sim=settings.similarity)
        except RETRYABLE as exc:
            return await run.pending(exc)
        writes = [w for p in planned if (w := _write(p, session_id, said, times)) is not None]
        report.dropped += [f"{_label(p)}: {p.reason}" for p in planned if p.action == "drop"]
        run.withheld += [_said(p) for p in planned if p.action in ("hold", "repeat")]
        run.summaries.append(parsed.extraction.summary)
        last = n == len(chunks)
        summary = await run.summary([*run.done, chunk]) if last else None
        try:
            commit = await store.commit_session(
                session_id,
                messages[-1].id if last else (chunk.upto or 0),
                writes,
                summary,
                first_message_id=messages[0].id,
            )
        except (DiskFull, DiskError) as exc:  # nothing of it was saved: retried when space is back
            return await run.pending(exc)
        run.done.append(chunk)
        report.learn(commit.ids)
        report.summary_id = commit.summary_id or report.summary_id
        facts_changed = facts_changed or commit.facts_changed
    report.status = "processed"
    if facts_changed:
        report.profile_updated = await refresh_profile(store, llm, settings, report)
    return report


@dataclass
class _Run:
    """One session end under way: what it has done so far, for its summary or its failure."""

    store: MemoryStore
    llm: JsonModel
    settings: EndSettings
    report: EndReport
    messages: list[Message]
    done: list[Chunk] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)  # what waits for review: not summarised

    async def summary(self, chunks: list[Chunk], *, merge: bool = True) -> str | None:
        ids = {mid for chunk in chunks for mid, _ in chunk.lines}
        text = await session_summary(
            self.llm,
            self.settings,
            self.report,
            self.summaries,
            # The user's words and tools' output, not the assistant's: a small model's
            # replies are where invented summaries come from.
            sources=[t for c in chunks for _, t in c.lines if not t.startswith("Assistant:")],
            user_texts=[m.content for m in self.messages if m.role == "user" and m.id in ids],
            withheld=self.withheld,
            merge=merge,
        )
        return await self.store.without_forgotten(text)  # forgotten: not summarised again

    async def pending(self, exc: BaseException) -> EndReport:
        """Leave the session pending with the reason; the chunks already learned from stay,
        with a summary of them (no model call: it just failed)."""
        report = self.report
        reason = str(exc) or type(exc).__name__
        log.warning("session %s left pending: %s", report.session_id, reason)
        try:
            if self.done and (upto := self.done[-1].upto):
                summary = await self.summary(self.done, merge=False)
                if summary:
                    commit = await self.store.commit_session(
                        report.session_id, upto, [], summary, first_message_id=self.messages[0].id
                    )
                    report.summary_id = commit.summary_id
            await self.store.mark_pending(report.session_id, reason)
        except (DiskFull, DiskError) as err:  # unsaved; the daemon retries it all the same
            log.warning("session %s: its pending state is not saved: %s", report.session_id, err)
        report.status, report.reason = "pending", reason
        return report


async def _chunks(
    llm: JsonModel, settings: EndSettings, lines: list[tuple[int, str]], attempt: int
) -> list[Chunk]:
    if settings.chunk_chars:
        return plan_chunks(lines, max(20, settings.chunk_chars >> min(attempt, 3)), size=len)
    lookup = getattr(llm, "context_length", None)
    context = await lookup(settings.model) if lookup is not None else None
    instructions = prompt_tokens(extraction_messages(""))
    limit = chunk_tokens(context, instructions, output_tokens(EXTRACTION_SCHEMA), attempt)
    return plan_chunks(lines, limit)


def _day(times: dict[int, str], chunk: Chunk) -> date | None:
    """The local date the chunk's conversation took place (its first message)."""
    first = times.get(chunk.lines[0][0]) if chunk.lines else None
    return parse_iso(first).astimezone().date() if first else None


def _said_at(fact: FactCandidate, said: Transcript, times: dict[int, str]) -> datetime:
    """When the fact was said: the time of the message its quote comes from (else now)."""
    message = said.first_with(squash(fact.evidence))
    when = times.get(message) if message is not None else None
    return parse_iso(when) if when else datetime.now(UTC)


async def _extract(
    llm: JsonModel, settings: EndSettings, chunk: Chunk, report: EndReport, day: date | None
) -> Parsed:
    report.llm_calls += 1
    answer = await llm.complete_json_loose(
        settings.model,
        extraction_messages(chunk.text, day=day),
        EXTRACTION_SCHEMA,
        {**EXTRACT_OPTIONS, **(settings.options or {})},
    )
    parsed = parse_extraction(answer.value, cut=answer.cut)
    report.offered += parsed.offered
    report.dropped += parsed.dropped
    return parsed


def _grounded(
    parsed: Parsed,
    said: Transcript,
    report: EndReport,
    seen: set[tuple[str, ...]],
    times: dict[int, str],
) -> Extraction:
    """The candidates whose quote is the user's own words and supports them; one that an
    earlier chunk of this run already proposed is passed over (it is not a repetition)."""
    ex = parsed.extraction
    facts, rules = [], []
    for fact in ex.facts:
        same = (normalize_key(fact.subject, fact.key), normalize(fact.value))
        if same in seen:
            continue
        seen.add(same)
        why = check_candidate(fact.value, fact.evidence, said) or expiry_problem(
            fact, _said_at(fact, said, times), datetime.now(UTC)
        )
        if why:
            report.dropped.append(f"{fact.key}: {fact.value}: {why}")
        else:
            facts.append(fact)
    for rule in ex.rules:
        if ("rule", normalize(rule.instruction)) in seen:
            continue
        seen.add(("rule", normalize(rule.instruction)))
        if why := check_candidate(rule.instruction, rule.evidence, said, kind="rule"):
            report.dropped.append(f"{rule.instruction}: {why}")
        else:
            rules.append(rule)
    return Extraction(facts, rules, ex.summary)


async def refresh_profile(
    store: MemoryStore, llm: JsonModel, settings: EndSettings, report: EndReport | None = None
) -> bool:
    """Rewrite the profile summary from stored facts only. A failure keeps it marked stale
    (it is retried later); the session's memories are already safe. An answer that is not
    grounded in the facts is replaced by the facts themselves."""
    facts, _ = await store.list_memories(kind="fact", sort="strength", limit=200)
    # What holds only for a while stays out of the lasting profile: the prompt drops it the
    # moment it expires, which a summary written earlier could not.
    facts = [m for m in facts if m.expires_at is None]
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
    kept, notes = checked_profile(text.strip(), facts)
    if report is not None:
        report.notes += notes
    if not kept:
        return False
    await store.set_profile_summary(kept)
    return True


def _said(p: Planned) -> str:
    c = p.candidate
    return c.value if isinstance(c, FactCandidate) else c.instruction


def _label(p: Planned) -> str:
    c = p.candidate
    return f"{c.key}: {c.value}" if isinstance(c, FactCandidate) else c.instruction


def _write(
    p: Planned, session_id: str, said: Transcript, times: dict[int, str]
) -> SessionWrite | None:
    if p.action == "drop":
        return None
    quote = squash(p.candidate.evidence)
    span = said.first_with(quote) if quote else None  # the message the quote comes from
    if isinstance(p.candidate, FactCandidate):
        c = p.candidate
        memory = NewMemory(
            value=c.value,
            kind="fact",
            category=c.category,
            subject=c.subject,
            key=c.key,
            evidence=c.evidence,
            source=p.source or c.source,  # as the write policy settled it
            confidence=c.confidence,
            session_id=session_id,
            message_from=span,
            message_to=span,
            expires_at=c.expires_at(_said_at(c, said, times)),
        )
    else:
        memory = NewMemory(
            value=p.candidate.instruction,
            kind="rule",
            evidence=p.candidate.evidence,
            source=p.source or "conversation",
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
