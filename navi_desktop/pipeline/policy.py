"""The deterministic write policy applied to every candidate a model proposes."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum


class Verdict(StrEnum):
    COMMIT = "commit"  # write as an active memory now
    HOLD = "hold"  # keep for the user's review
    REPEAT = "repeat"  # keep held; commit when the fact comes up again
    DROP = "drop"


SENSITIVE_CATEGORIES = frozenset({"health", "relationships"})
# Finances and identity documents have no category of their own: recognise them by words.
_SENSITIVE_WORDS = re.compile(
    r"\b(salary|income|debt|loan|mortgage|bank|iban|credit card|account number|tax|"
    r"passport|social security|ssn|national id|identity card|driver'?s licen[cs]e|"
    r"password|pin code)\b",
    re.IGNORECASE,
)
_LONG_NUMBER = re.compile(r"\d[\d\s-]{7,}\d")
_EXPLICIT = re.compile(
    r"\b(remember (that|this|me)|don'?t forget|note that|keep in mind)\b", re.IGNORECASE
)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str


def squash(text: str) -> str:
    """Comparable form of a quote: NFKC, case-folded, whitespace and quote marks unified."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[\u2018\u2019\u201c\u201d`´]", "'", text).replace('"', "'")
    return re.sub(r"\s+", " ", text).strip(" .,!?;:'")


def is_sensitive(category: str | None, key: str, value: str) -> bool:
    if category in SENSITIVE_CATEGORIES:
        return True
    text = f"{key} {value}"
    return bool(_SENSITIVE_WORDS.search(text) or _LONG_NUMBER.search(text))


def decide(
    *,
    category: str | None,
    key: str,
    value: str,
    evidence: str,
    confidence: float,
    transcript: str,
    user_lines: list[str],
    forgotten: bool,
) -> Decision:
    """commit / hold / commit on repetition / drop, in that order of precedence:
    no evidence in the transcript or forgotten before → drop; the user asked to remember →
    commit; sensitive → hold; low confidence → hold or wait for a repeat; else commit."""
    quote = squash(evidence)
    if len(quote) < 3 or quote not in squash(transcript):
        return Decision(Verdict.DROP, "evidence quote not found in the conversation")
    if forgotten:
        return Decision(Verdict.DROP, "the user made Navi forget this")
    if any(quote in squash(line) and _EXPLICIT.search(line) for line in user_lines):
        return Decision(Verdict.COMMIT, "the user asked to remember it")
    if is_sensitive(category, key, value):
        return Decision(Verdict.HOLD, "sensitive: waiting for your review")
    if confidence < 0.5:
        return Decision(Verdict.HOLD, "low confidence: waiting for your review")
    if confidence < 0.7:
        return Decision(Verdict.REPEAT, "uncertain: kept until it comes up again")
    return Decision(Verdict.COMMIT, "stated in conversation")
