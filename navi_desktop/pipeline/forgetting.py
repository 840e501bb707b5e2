"""After a forget: the daemon's logs lose the text too, summaries that were redacted in place
are rewritten to read naturally, the profile summary is written again from the remaining
facts, and a scrub that had to wait for another reader of the file is retried.

The model only ever sees the redacted text, so a rewrite cannot bring the forgotten value
back; a rewrite that is not grounded in the redacted text, or still shows the marker, is not
kept (the redacted version stays, which is correct, only less fluent). When no model is
reachable, everything stays redacted and maintenance tries again later.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import DiskError, DiskFull
from navi_desktop.memory.matching import MARKER
from navi_desktop.pipeline.grounding import check_summary
from navi_desktop.pipeline.session_end import RETRYABLE, EndSettings, ask_field, refresh_profile

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore
    from navi_desktop.pipeline.extraction import JsonModel

log = logging.getLogger(__name__)

REWRITE_PROMPT = f"""\
Below is a short summary from which private details were removed; each removal shows as \
{MARKER}. Rewrite it so that it reads naturally without them: drop or rephrase what refers \
to a removed detail. Do not guess, restore or hint at what was removed, and add nothing \
that the text does not say. Keep its language. Return JSON: {{"summary": "..."}}."""
REWRITE_SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string", "maxLength": 1200}},
    "required": ["summary"],
}


@dataclass
class AfterForget:
    rewritten: list[int] = field(default_factory=list)
    profile_refreshed: bool = False
    errors: list[str] = field(default_factory=list)


async def rewrite_redacted(
    store: MemoryStore, llm: JsonModel, settings: EndSettings, report: AfterForget
) -> None:
    """Ask the model to rewrite each redacted summary or reflection; keep what passes."""
    for memory in await store.redacted_summaries():
        try:
            text: Any = await ask_field(llm, settings, REWRITE_PROMPT, memory.value, REWRITE_SCHEMA)
        except RETRYABLE as exc:
            report.errors.append(f"rewriting summaries: {exc}")
            return  # the model is away: the rest waits for the next try too
        if not isinstance(text, str) or not text.strip() or MARKER in text:
            continue
        kept, _ = check_summary(text.strip(), [memory.value.replace(MARKER, " ")])
        if kept and await store.rewrite_summary(memory.id, memory.value, kept):
            report.rewritten.append(memory.id)


async def after_forget(
    store: MemoryStore, llm: JsonModel | None, settings: EndSettings | None
) -> AfterForget:
    """The rewrites a forget leaves to do; a model failure leaves them for later."""
    report = AfterForget()
    if llm is None or settings is None:
        return report
    await rewrite_redacted(store, llm, settings, report)
    _, stale = await store.profile_summary()
    if stale:
        try:
            report.profile_refreshed = await refresh_profile(store, llm, settings)
        except RETRYABLE as exc:
            report.errors.append(f"profile summary: {exc}")
    if report.errors:
        log.info("after a forget, left for later: %s", "; ".join(report.errors))
    return report


async def finish_scrubs(store: MemoryStore) -> list[dict[str, Any]]:
    """Retry scrubs that waited for another reader of the file, or for space; the ones now
    complete. A disk still full is tried again at the next call."""
    try:
        done = await store.retry_scrubs()
        # Forgets a stop cut short before the backups had them (a file profile's own copies).
        if (retry_copies := getattr(store, "retry_copy_scrubs", None)) is not None:
            await retry_copies()
    except (DiskFull, DiskError) as exc:
        log.info("delayed scrub of %s still waits: %s", store.path, exc)
        return []
    if done:
        log.info("delayed scrub complete for %s", store.path)
    return done
