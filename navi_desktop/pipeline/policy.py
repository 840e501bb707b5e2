"""The deterministic write policy applied to every candidate a model proposes."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from navi_desktop.memory.facts import AWAITING_REPEAT


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
    source: str | None = None  # the memory's source when the candidate's claim was wrong
    foreign: bool = False  # the evidence is not in the user's own messages


def squash(text: str) -> str:
    """Comparable form of a quote: NFKC, case-folded, whitespace and quote marks unified."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[\u2018\u2019\u201c\u201d`´]", "'", text).replace('"', "'")
    return re.sub(r"\s+", " ", text).strip(" .,!?;:'")


@dataclass(frozen=True)
class Conversation:
    """What evidence quotes are checked against, squashed once per session rather than once
    per candidate: the transcript, the user's own lines, and those that ask to remember
    something. A quote found only outside the user's lines came from the assistant or from a
    tool's output (a web page, a file): it is never the user's instruction."""

    transcript: str
    explicit_lines: tuple[str, ...]
    user_lines: tuple[str, ...] = ()
    tool_lines: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, transcript: str, user_lines: Iterable[str], tool_lines: Iterable[str] = ()
    ) -> Conversation:
        users = tuple(user_lines)
        explicit = tuple(squash(line) for line in users if _EXPLICIT.search(line))
        return cls(
            squash(transcript),
            explicit,
            tuple(squash(line) for line in users),
            tuple(squash(line) for line in tool_lines),
        )

    def origin(self, quote: str) -> str:
        """Who said a (squashed) quote: "user", "tool" (only in tool output) or "assistant"."""
        if any(quote in line for line in self.user_lines):
            return "user"
        if any(quote in line for line in self.tool_lines):
            return "tool"
        return "assistant"


def asks_to_remember(message: str) -> bool:
    """The message asks Navi to remember ("remember that…", "keep in mind…")."""
    return bool(_EXPLICIT.search(message))


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
    conversation: Conversation,
    forgotten: bool,
    kind: str = "fact",
    source: str = "conversation",
) -> Decision:
    """commit / hold / commit on repetition / drop, in that order of precedence:
    no evidence in the transcript or forgotten before → drop; not from the user's own words
    and it would change how Navi behaves (a rule, a preference) → hold; the user asked to
    remember → commit; sensitive → hold; low confidence → hold or wait for a repeat; else
    commit. Only the user's own messages make a rule or a ``user_explicit`` fact; evidence
    only in tool output makes at most a ``tool_call`` fact."""
    quote = squash(evidence)
    if len(quote) < 3 or quote not in conversation.transcript:
        return Decision(Verdict.DROP, "evidence quote not found in the conversation")
    if forgotten:
        return Decision(Verdict.DROP, "the user made Navi forget this")
    origin = conversation.origin(quote)
    if origin != "user":
        where = "a tool's output" if origin == "tool" else "the assistant's words"
        claimed = "tool_call" if origin == "tool" else "conversation"
        if kind == "rule" or category == "preferences":
            return Decision(
                Verdict.HOLD,
                f"from {where}, not from you: it would change how Navi behaves,"
                " so it waits for your review",
                claimed,
                foreign=True,
            )
        source = claimed
    elif source == "tool_call":
        source = "conversation"
    decision = _decide_stated(category, key, value, quote, confidence, conversation)
    return Decision(decision.verdict, decision.reason, source, origin != "user")


def _decide_stated(
    category: str | None,
    key: str,
    value: str,
    quote: str,
    confidence: float,
    conversation: Conversation,
) -> Decision:
    if any(quote in line for line in conversation.explicit_lines):
        return Decision(Verdict.COMMIT, "the user asked to remember it")
    if is_sensitive(category, key, value):
        return Decision(Verdict.HOLD, "sensitive: waiting for your review")
    if confidence < 0.5:
        return Decision(Verdict.HOLD, "low confidence: waiting for your review")
    if confidence < 0.7:
        return Decision(Verdict.REPEAT, AWAITING_REPEAT)  # the store promotes on this reason
    return Decision(Verdict.COMMIT, "stated in conversation")
