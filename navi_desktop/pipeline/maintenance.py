"""Scheduled jobs the daemon runs: decay, weekly reflection, embedding backfill, and
rewriting a profile summary left stale by a failed or skipped refresh, and summaries a forget
redacted while no model was reachable."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from navi_desktop.errors import DiskError, DiskFull
from navi_desktop.memory.clock import now_iso, parse_iso
from navi_desktop.memory.documents import memory_text
from navi_desktop.memory.facts import NewMemory
from navi_desktop.pipeline.extraction import JsonModel, ModelOutputError
from navi_desktop.pipeline.forgetting import AfterForget, rewrite_redacted
from navi_desktop.pipeline.session_end import (
    RETRYABLE,
    EndSettings,
    ask_field,
    refresh_profile,
)

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore

log = logging.getLogger(__name__)

REFLECTION_PROMPT = """\
Below are facts learned about the user recently, and older ones. Write one to three short \
insights that connect them (patterns, goals, what matters to the user), each supported by at \
least two of the facts. Only what the facts support; no advice. Return JSON: \
{"insights": ["..."]}."""
REFLECTION_SCHEMA = {
    "type": "object",
    "properties": {
        "insights": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 300}}
    },
    "required": ["insights"],
}
MIN_NEW_FACTS = 3
REFLECTION_EVERY = timedelta(days=7)


@dataclass
class MaintenanceReport:
    archived: list[int] = field(default_factory=list)
    reflections: list[int] = field(default_factory=list)
    embedded: int = 0
    ratings_purged: int = 0
    profile_refreshed: bool = False
    backup: str | None = None  # the daily backup made now, if one was due
    errors: list[str] = field(default_factory=list)


async def reflect(
    store: MemoryStore, llm: JsonModel, settings: EndSettings, *, now: str | None = None
) -> list[int]:
    """At most once a week, and only when at least three facts are new since the last one."""
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
    insights = await ask_field(llm, settings, REFLECTION_PROMPT, listing, REFLECTION_SCHEMA)
    if not isinstance(insights, list) or not all(isinstance(i, str) for i in insights):
        raise ModelOutputError('reflection must return {"insights": [string, ...]}')
    results = await store.add_memories(
        [
            NewMemory(value=i.strip(), kind="reflection", source="auto_discovery", confidence=0.6)
            for i in insights
            if i.strip()
        ],
        actor="reflection",
    )
    await store.set_meta("last_reflection_at", now)
    await store.set_meta("last_reflection_fact_id", str(max(m.id for m in new)))
    return [r.memory.id for r in results if r.memory is not None]


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
    made = await store.db.backup_if_due()
    report.backup = str(made.path) if made is not None else None
    try:
        report.embedded = await store.backfill_embeddings()
    except RETRYABLE as exc:
        report.errors.append(f"embedding: {exc}")
    if llm is None or settings is None:
        return report
    try:
        report.reflections = await reflect(store, llm, settings, now=now)
    except RETRYABLE as exc:
        report.errors.append(f"reflection: {exc}")
    redacted = AfterForget()  # summaries a forget redacted while no model was reachable
    await rewrite_redacted(store, llm, settings, redacted)
    report.errors += redacted.errors
    _, stale = await store.profile_summary()
    if stale:
        report.profile_refreshed = await refresh_profile(store, llm, settings)
    return report
