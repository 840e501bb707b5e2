"""Re-ranking of transcript hits by what a question says about them, with no model call.

* **Author.** A question that names a message's author ("What does Melanie do to destress?")
  is answered by what that person said far more often than by what others said about them:
  on LoCoMo, 449 of 463 evidence turns of questions naming one speaker were that speaker's.
* **Time.** A "when" question is answered by a turn that says when ("yesterday", "last week",
  "in 2022"); the turn's own date is already in the indexed text.

Both multiply the fused score of the messages they favour, so they only re-order candidates
that the signals found; the factors live in ``search.Tuning``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from navi_desktop.memory.textproc import normalize, tokens

if TYPE_CHECKING:
    from navi_desktop.memory.search import Key, Ranked, Tuning

# Questions asking for a time ("When did…", "What year…", "How long ago…", "Since when…").
TIME_QUESTION = re.compile(
    r"^\W*(when|since when|what (year|month|date|day|time)|which (year|month|day))\b"
    r"|\bhow long ago\b",
    re.IGNORECASE,
)
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
# "may" alone is a verb far more often than a month: it counts only beside a day number.
_MONTHS = "january|february|march|april|june|july|august|september|october|november|december"
_PERIOD = rf"week|weekend|month|year|night|summer|winter|spring|fall|autumn|{_DAYS}"
# Words that place an event in time.
TIME_WORDS = re.compile(
    rf"\b(yesterday|today|tonight|tomorrow|ago|recently|lately|weekend|{_DAYS}|{_MONTHS}"
    rf"|(last|next|this|past|few|couple of) ({_PERIOD})s?"
    r"|may \d{1,2}|\d{1,2} may|(19|20)\d\d)\b",
    re.IGNORECASE,
)


def asks_when(query: str) -> bool:
    return bool(TIME_QUESTION.search(query))


def says_when(text: str) -> bool:
    return bool(TIME_WORDS.search(text))


def named_authors(query: str, authors: Iterable[str]) -> set[str]:
    """The authors (message names) the query names, as whole words."""
    words = tokens(query)
    text = f" {' '.join(words)} "
    named = set()
    for author in authors:
        parts = tokens(author)
        if parts and f" {' '.join(parts)} " in text:
            named.add(normalize(author))
    return named


def boost_sessions(
    tuning: Tuning,
    session_of: Mapping[int, str],
    scores: dict[Key, float],
    detail: dict[Key, dict[str, Ranked]],
) -> None:
    """Messages from the conversations that match best as a whole rank higher: a question
    about one conversation is answered across several of its turns. Ranks sessions by the
    sum of their candidate messages' scores and fuses that rank like another list."""
    totals: dict[str, float] = defaultdict(float)
    for mid, session in session_of.items():
        totals[session] += scores[("message", mid)]
    rank_of = {s: r for r, s in enumerate(sorted(totals, key=lambda s: -totals[s]), start=1)}
    weight = dict(tuning.weights).get("session", 1.0)
    for mid, session in session_of.items():
        scores[("message", mid)] += weight / (tuning.rrf_k + rank_of[session])
        detail[("message", mid)]["session"] = (rank_of[session], totals[session])


def boost_named_and_dated(
    tuning: Tuning,
    query: str,
    messages: Mapping[int, tuple[str, str | None, str]],
    scores: dict[Key, float],
    detail: dict[Key, dict[str, Ranked]],
    limit: int,
) -> None:
    """Multiply the scores of messages whose author the query names, and, for a "when"
    question, of messages that say when. ``messages``: id -> (session, name, content).

    Only messages that both factors could lift into the first ``limit`` are looked at (the
    time pattern costs ~25 µs a message): the others end below, whatever their factor."""
    named = named_authors(query, {m[1] for m in messages.values() if m[1]})
    when = tuning.time_boost != 1.0 and asks_when(query)
    ranked = sorted((scores[("message", mid)] for mid in messages), reverse=True)
    most = tuning.author_boost * (tuning.time_boost if when else 1.0)
    floor = ranked[limit - 1] / most if len(ranked) >= limit and most > 1.0 else float("-inf")
    for mid, (_, name, content) in messages.items():
        key = ("message", mid)
        if scores[key] < floor:
            continue
        if tuning.author_boost != 1.0 and name and normalize(name) in named:
            scores[key] *= tuning.author_boost
            detail[key]["author"] = (1, tuning.author_boost)
        if when and says_when(content):
            scores[key] *= tuning.time_boost
            detail[key]["time"] = (1, tuning.time_boost)
