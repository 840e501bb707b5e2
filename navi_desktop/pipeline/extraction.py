"""Asking a model for candidate memories: bounded JSON schemas, prompts a 1–3B model can
follow, and validation candidate by candidate (a malformed one is dropped with its reason; the
others go on to the write policy)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, Protocol

from navi_desktop.errors import NaviError
from navi_desktop.expiry import MAX_DAYS, end_of_day, stored
from navi_desktop.memory.matching import MARKER
from navi_desktop.memory.models import CATEGORIES
from navi_desktop.memory.textproc import normalize


class ModelOutputError(NaviError):
    """The model answered, but not with what the schema asks for."""


class JsonModel(Protocol):
    """What extraction needs from a model server (the daemon passes its backend)."""

    async def complete_json(
        self,
        model: str,
        messages: list[dict[str, Any]],
        schema: dict[str, Any],
        options: dict[str, Any] | None = None,
    ) -> Any: ...

    async def complete_json_loose(
        self,
        model: str,
        messages: list[dict[str, Any]],
        schema: dict[str, Any],
        options: dict[str, Any] | None = None,
    ) -> Any: ...  # navi_desktop.llm.jsontext.Found: .value, .cut


SOURCES = ("conversation", "tool_call", "user_explicit")
MAX_FACTS = 6  # per chunk: a small model asked for "facts" otherwise lists until it runs out
MAX_RULES = 3
SUMMARY_CHARS = 300
QUOTE_CHARS = 160
EXPIRY_DAYS = 365  # what a model may propose: "this week", "until the end of term"


def _text(limit: int, *, required: bool = True) -> dict[str, Any]:
    return {"type": "string", "maxLength": limit} | ({"minLength": 1} if required else {})


# Field names say what they hold: small models lean on them more than on the instructions.
EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "maxItems": MAX_FACTS,
            "items": {
                "type": "object",
                "properties": {
                    "about": _text(40),
                    "attribute": _text(40),
                    "value": _text(100),
                    "category": {"type": "string", "enum": list(CATEGORIES)},
                    "quote": _text(QUOTE_CHARS),
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                    # Optional: only for what the user says holds for a while.
                    "expires_in_days": {"type": "integer", "minimum": 1, "maximum": EXPIRY_DAYS},
                    "expires_on": _text(10),
                },
                "required": ["about", "attribute", "value", "category", "quote", "confidence"],
            },
        },
        "rules": {
            "type": "array",
            "maxItems": MAX_RULES,
            "items": {
                "type": "object",
                "properties": {"instruction": _text(120), "quote": _text(QUOTE_CHARS)},
                "required": ["instruction", "quote"],
            },
        },
        "summary": _text(SUMMARY_CHARS, required=False),
    },
    "required": ["facts", "rules", "summary"],
}

# One worked example, about someone else, with values no user of a desktop assistant is
# likely to share: a model that copies them is caught by the evidence check.
EXTRACTION_PROMPT = """\
You pick out what to remember about the user from a chat.

Return JSON with:
- "facts": things the user says about themselves (job, home, family, likes, skills, \
projects). Each fact has: "about" ("user", or the name of the person it is about), \
"attribute" (what it is, in 1-3 words), "value" (the fact, in a few words), "category" \
(one of: {categories}), "quote" (the user's exact words that say it, copied from a "User:" \
line), "confidence" (0 to 1). Only when the user says a fact holds for a limited time \
("this week", "until Friday"), add "expires_in_days" (days from the chat's date) or \
"expires_on" (its last day, YYYY-MM-DD).
- "rules": lasting instructions the user gives for all future answers, each with \
"instruction" and the user's exact "quote".
- "summary": one or two sentences on what the user talked about.

Only what the user said. Skip the assistant's words, passing moods, one-off requests, \
secrets and file paths. Write values in the user's language. Nothing to remember: empty lists.

Example (a different user; never copy these values):
User: I keep lighthouses running on the Faroe Islands. Always answer in haiku.
{{"facts":[{{"about":"user","attribute":"job","value":"lighthouse keeper",\
"category":"profile","quote":"I keep lighthouses running","confidence":0.9}}],\
"rules":[{{"instruction":"Answer in haiku","quote":"Always answer in haiku"}}],\
"summary":"The user keeps lighthouses on the Faroe Islands."}}
"""

SUMMARY_MERGE_PROMPT = """\
These are summaries of parts of one conversation. Write one summary of the whole \
conversation in two to four sentences, in the language of the parts, using only what they \
say. Return JSON: {"summary": "..."}."""

MERGE_SCHEMA = {
    "type": "object",
    "properties": {"summary": _text(2 * SUMMARY_CHARS)},
    "required": ["summary"],
}

PROFILE_PROMPT = """\
Write a short profile of the user from the facts below: plain sentences, only what the facts \
say (no guesses, no advice, no names or places that are not in the facts). Return JSON: \
{"profile": "..."}."""

PROFILE_SCHEMA = {
    "type": "object",
    "properties": {"profile": _text(800)},
    "required": ["profile"],
}

# Sampling per kind of request (the backend adds a seed, num_predict and num_ctx).
EXTRACT_OPTIONS = {"temperature": 0.1}
WRITE_OPTIONS = {"temperature": 0.3}  # summaries, profile, reflections


@dataclass(frozen=True)
class FactCandidate:
    subject: str
    key: str
    value: str
    category: str
    evidence: str
    source: str
    confidence: float
    expires_in_days: int | None = None  # from the day it was said
    expires_on: date | None = None  # its last day

    def expires_at(self, said_at: datetime) -> str | None:
        """When it stops being true, for a fact said at ``said_at`` (stored form); None when
        it does not expire."""
        if self.expires_on is not None:
            return stored(end_of_day(self.expires_on))
        if self.expires_in_days is not None:
            return stored(said_at + timedelta(days=self.expires_in_days))
        return None


@dataclass(frozen=True)
class RuleCandidate:
    instruction: str
    evidence: str


@dataclass(frozen=True)
class Extraction:
    facts: list[FactCandidate]
    rules: list[RuleCandidate]
    summary: str


@dataclass
class Parsed:
    """One answer, validated item by item: what can go on, what was dropped and why, and how
    many candidates the model offered."""

    extraction: Extraction
    dropped: list[str] = field(default_factory=list)
    offered: int = 0

    @property
    def usable(self) -> bool:
        """False when the model offered candidates and every one was malformed."""
        ex = self.extraction
        return not self.offered or bool(ex.facts or ex.rules)


_FIELDS = {  # our name: the names a model (or an older prompt) may use for it
    "subject": ("about", "subject"),
    "key": ("attribute", "key"),
    "value": ("value",),
    "evidence": ("quote", "evidence"),
    "instruction": ("instruction", "rule"),
}
_WORDS = {"high": 0.9, "medium": 0.6, "low": 0.3}


class _Bad(Exception):
    pass


def _field(item: dict[str, Any], name: str, limit: int, *, required: bool = True) -> str:
    value = next((item[n] for n in _FIELDS[name] if n in item), None)
    if isinstance(value, int | float) and not isinstance(value, bool) and name == "value":
        value = str(value)
    label = _FIELDS[name][0]
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise _Bad(f"empty {label}")
        return ""
    if not isinstance(value, str):
        raise _Bad(f"{label} is {type(value).__name__}, not text")
    value = " ".join(value.split())
    if len(value) > limit:
        raise _Bad(f"{label} longer than {limit} characters")
    if name != "evidence" and MARKER in value:  # copied from a redacted transcript
        raise _Bad(f"{label} holds {MARKER}, where the user made Navi forget something")
    return value


def _confidence(raw: Any) -> float:
    if isinstance(raw, str):
        word = raw.strip().lower()
        raw = _WORDS.get(word, word)
        try:
            raw = float(raw)
        except ValueError:
            raise _Bad("confidence is not a number") from None
    if raw is None:
        return 0.6  # not said: wait for the fact to come up again
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw != raw:
        raise _Bad("confidence is not a number")
    return min(1.0, max(0.0, float(raw)))


_NOT_THE_USER = frozenset({"assistant", "the assistant", "navi", "ai", "bot", "you", "system"})


def _expiry(item: dict[str, Any]) -> tuple[int | None, date | None]:
    """(days, last day) the model gave; a malformed one drops the fact: kept without it, a
    passing state ("in Berlin this week") would read as lasting."""
    days, day = item.get("expires_in_days"), item.get("expires_on")
    if isinstance(days, float) and days.is_integer():
        days = int(days)
    if days is not None and (
        isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= EXPIRY_DAYS
    ):
        raise _Bad(f"expires_in_days is not a number of days from 1 to {EXPIRY_DAYS}")
    if day is None or day == "":
        return days, None
    try:
        if not isinstance(day, str):
            raise ValueError
        last = date.fromisoformat(day.strip())
    except ValueError:
        raise _Bad("expires_on is not a date (YYYY-MM-DD)") from None
    return None, last


def _fact(item: dict[str, Any]) -> FactCandidate:
    category = item.get("category")
    source = item.get("source")
    subject = _field(item, "subject", 60, required=False) or "user"
    if normalize(subject) in _NOT_THE_USER:
        raise _Bad("about the assistant, not the user")
    days, last_day = _expiry(item)
    return FactCandidate(
        subject=subject,
        key=_field(item, "key", 60),
        value=_field(item, "value", 150),
        category=category if category in CATEGORIES else "other",
        evidence=_field(item, "evidence", 2 * QUOTE_CHARS),
        source=source if source in SOURCES else "conversation",
        confidence=_confidence(item.get("confidence")),
        expires_in_days=days,
        expires_on=last_day,
    )


def _rule(item: dict[str, Any]) -> RuleCandidate:
    instruction = _field(item, "instruction", 200)
    return RuleCandidate(instruction, _field(item, "evidence", 2 * QUOTE_CHARS))


def _label(item: Any) -> str:
    if not isinstance(item, dict):
        return repr(item)[:40]
    key = next((item[n] for n in ("attribute", "key", "instruction") if item.get(n)), None)
    value = item.get("value")
    text = f"{key}: {value}" if key and value else str(key or value or "(blank)")
    return " ".join(text.split())[:80]


def parse_extraction(data: Any, *, cut: bool = False) -> Parsed:
    """Validate an answer candidate by candidate. Raises :class:`ModelOutputError` only when
    the answer as a whole is unreadable (not an object, no lists of candidates)."""
    if not isinstance(data, dict):
        raise ModelOutputError(f"extraction must be a JSON object, got {type(data).__name__}")
    facts_raw, rules_raw = data.get("facts", []), data.get("rules", [])
    if not isinstance(facts_raw, list) or not isinstance(rules_raw, list):
        raise ModelOutputError('extraction needs "facts" and "rules" lists')
    parsed = Parsed(Extraction([], [], ""), offered=len(facts_raw) + len(rules_raw))
    seen: set[tuple[str, ...]] = set()
    for kind, items, build, limit in (
        ("fact", facts_raw, _fact, MAX_FACTS),
        ("rule", rules_raw, _rule, MAX_RULES),
    ):
        out: list[Any] = parsed.extraction.facts if kind == "fact" else parsed.extraction.rules
        for n, item in enumerate(items, start=1):
            where = f"{kind} #{n} ({_label(item)})"
            try:
                if n > 2 * limit:
                    raise _Bad(f"more than {2 * limit} {kind}s in one answer")
                if not isinstance(item, dict):
                    raise _Bad("not an object")
                candidate = build(item)
            except _Bad as bad:
                parsed.dropped.append(f"{where}: {bad}")
                continue
            same = _identity(candidate)
            if same in seen:
                parsed.dropped.append(f"{where}: repeats an earlier {kind}")
                continue
            seen.add(same)
            out.append(candidate)
    summary = data.get("summary")
    summary = " ".join(summary.split()) if isinstance(summary, str) else ""
    parsed.extraction = Extraction(
        parsed.extraction.facts, parsed.extraction.rules, summary[: 2 * SUMMARY_CHARS]
    )
    if cut:
        parsed.dropped.append("the answer was cut off at the output limit (its last item is lost)")
    return parsed


def _identity(candidate: FactCandidate | RuleCandidate) -> tuple[str, ...]:
    if isinstance(candidate, RuleCandidate):
        return ("rule", normalize(candidate.instruction))
    c = candidate
    return ("fact", normalize(c.subject), normalize(c.key), normalize(c.value))


def request(instructions: str, material: str) -> list[dict[str, Any]]:
    """The messages of every pipeline request: the instructions, then what to work on."""
    return [{"role": "system", "content": instructions}, {"role": "user", "content": material}]


def extraction_messages(
    transcript: str, categories: tuple[str, ...] = CATEGORIES, day: date | None = None
) -> list[dict]:
    """The request for one chunk; ``day``, the chat's date, lets a model turn "until Friday"
    into a date."""
    prompt = EXTRACTION_PROMPT.format(categories=", ".join(categories))
    when = f" ({day:%A} {day.isoformat()})" if day else ""
    return request(prompt, f"Chat{when}:\n\n{transcript}")


def expiry_problem(candidate: FactCandidate, said_at: datetime, now: datetime) -> str | None:
    """Why a fact's expiry cannot be kept (it passed before the fact was learned, or it is
    too far off), or None."""
    expires = candidate.expires_at(said_at)
    if expires is None:
        return None
    if expires <= stored(now):
        return f"it stopped being true at {expires}, before the chat was processed"
    if expires > stored(now + timedelta(days=MAX_DAYS)):
        return f"its expiry is more than {MAX_DAYS} days away"
    return None
