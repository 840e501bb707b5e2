"""Scheduled jobs the daemon runs: decay, weekly reflection, embedding backfill, rewriting a
profile summary left stale by a failed or skipped refresh and summaries a forget redacted
while no model was reachable, and the model's entity pass (last: it is the least urgent)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from navi_desktop.errors import DiskError, DiskFull
from navi_desktop.memory.clock import now_iso, parse_iso
from navi_desktop.memory.documents import memory_text
from navi_desktop.memory.facts import NewMemory
from navi_desktop.pipeline.entity_pass import enrich_entities
from navi_desktop.pipeline.extraction import WRITE_OPTIONS, JsonModel, ModelOutputError, request
from navi_desktop.pipeline.forgetting import AfterForget, rewrite_redacted
from navi_desktop.pipeline.grounding import check_insight, sensitive
from navi_desktop.pipeline.policy import is_sensitive
from navi_desktop.pipeline.session_end import RETRYABLE, EndSettings, refresh_profile

if TYPE_CHECKING:
    from navi_desktop.memory.models import Memory
    from navi_desktop.memory.store import MemoryStore

log = logging.getLogger(__name__)

REFLECTION_PROMPT = """\
Below are facts learned about the user recently, and older ones. Write one to three short \
insights that connect them (patterns, goals, what matters to the user), each supported by at \
least two of the facts. Only what the facts support, in the facts' own words; no advice. \
Return JSON: {"insights": ["..."]}."""
REFLECTION_SCHEMA = {
    "type": "object",
    "properties": {
        "insights": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 300}}
    },
    "required": ["insights"],
}
MIN_NEW_FACTS = 3
MAX_INSIGHTS = 3  # what the schema allows; a model may ignore it
REFLECTION_EVERY = timedelta(days=7)


@dataclass
class MaintenanceReport:
    archived: list[int] = field(default_factory=list)
    reflections: list[int] = field(default_factory=list)
    reflections_dropped: list[str] = field(default_factory=list)  # "insight: why"
    embedded: int = 0
    ratings_purged: int = 0
    entity_links: int = 0  # added by the model's entity pass
    profile_refreshed: bool = False
    backup: str | None = None  # the daily backup made now, if one was due
    errors: list[str] = field(default_factory=list)


async def reflect(
    store: MemoryStore,
    llm: JsonModel,
    settings: EndSettings,
    *,
    now: str | None = None,
    dropped: list[str] | None = None,
) -> list[int]:
    """At most once a week, and only when at least three facts are new since the last one.
    An insight is checked like any candidate (grounding.check_insight): one not grounded in
    the facts is left out (logged, and added to ``dropped`` as "insight: why"), one on a
    sensitive matter is held for review."""
    now = now or now_iso()
    last = await store.get_meta("last_reflection_at")
    if last and parse_iso(now) - parse_iso(last) < REFLECTION_EVERY:
        return []
    facts, _ = await store.list_memories(kind="fact", sort="id", limit=200)
    seen_upto = int(await store.get_meta("last_reflection_fact_id") or 0)
    new = [m for m in facts if m.id > seen_upto]
    if len(new) < MIN_NEW_FACTS:
        return []
    older = [m for m in facts if m.id <= seen_upto][:50]
    listing = "New facts:\n" + "\n".join(f"- {memory_text(m)}" for m in new)
    if older:
        listing += "\n\nOlder facts:\n" + "\n".join(f"- {memory_text(m)}" for m in older)
    # Item by item, like extraction: one overlong or malformed insight costs only itself.
    answer = await llm.complete_json_loose(
        settings.model,
        request(REFLECTION_PROMPT, listing),
        REFLECTION_SCHEMA,
        {**WRITE_OPTIONS, **(settings.options or {})},
    )
    insights = answer.value.get("insights") if isinstance(answer.value, dict) else None
    if not isinstance(insights, list):
        raise ModelOutputError('reflection must return {"insights": [string, ...]}')
    given = [(memory_text(m), _touchy(m)) for m in [*new, *older]]
    batch: list[NewMemory] = []
    for n, insight in enumerate(insights):
        if not isinstance(insight, str) or not insight.strip():
            _left_out(dropped, repr(insight)[:60], "not a sentence")
            continue
        said = " ".join(insight.split())[:80]
        if n >= MAX_INSIGHTS:
            _left_out(dropped, said, f"more than {MAX_INSIGHTS} insights in one answer")
            continue
        checked = check_insight(insight, given)
        if checked.text is None:
            _left_out(dropped, said, checked.why or "")
            continue
        batch.append(
            NewMemory(
                value=checked.text,
                kind="reflection",
                source="auto_discovery",
                confidence=0.6,
                status="held" if checked.held else "active",
                review_reason=checked.why if checked.held else None,
            )
        )
    results = await store.add_memories(batch, actor="reflection")
    await store.set_meta("last_reflection_at", now)
    await store.set_meta("last_reflection_fact_id", str(max(m.id for m in new)))
    return [r.memory.id for r in results if r.memory is not None]


def _touchy(m: Memory) -> bool:
    """A fact an insight may not repeat without the user's review."""
    return is_sensitive(m.category, m.key or "", m.value) or sensitive(memory_text(m))


def _left_out(dropped: list[str] | None, insight: str, why: str) -> None:
    log.info("reflection left out (%s): %s", why, insight)
    if dropped is not None:
        dropped.append(f"{insight}: {why}")


async def run_maintenance(
    store: MemoryStore,
    llm: JsonModel | None,
    settings: EndSettings | None,
    *,
    now: str | None = None,
) -> MaintenanceReport:
    """Every job once; a model failure skips only the jobs that need the model, a full disk
    only the jobs that write."""
    report = MaintenanceReport()
    try:
        report.archived = (await store.decay(now=now)).archived or []
        report.ratings_purged = await store.purge_feedback()  # kept FEEDBACK_DAYS
        await store.optimize()
    except (DiskFull, DiskError) as exc:
        report.errors.append(f"decay: {exc}")
    # The rolling daily backup, when the daemon keeps them and one is due (memory/backup.py).
    made = await store.backup_if_due()
    report.backup = str(made.path) if made is not None else None
    try:
        report.embedded = await store.backfill_embeddings()
        await store.drop_unused_models(now=now)
    except RETRYABLE as exc:
        report.errors.append(f"embedding: {exc}")
    if llm is None or settings is None:
        return report
    try:
        report.reflections = await reflect(
            store, llm, settings, now=now, dropped=report.reflections_dropped
        )
    except RETRYABLE as exc:
        report.errors.append(f"reflection: {exc}")
    redacted = AfterForget()  # summaries a forget redacted while no model was reachable
    await rewrite_redacted(store, llm, settings, redacted)
    report.errors += redacted.errors
    _, stale = await store.profile_summary()
    if stale:
        report.profile_refreshed = await refresh_profile(store, llm, settings)
    try:
        report.entity_links = await enrich_entities(store, llm, settings)
    except RETRYABLE as exc:
        report.errors.append(f"entities: {exc}")
    return report
