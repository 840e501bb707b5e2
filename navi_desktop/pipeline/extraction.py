"""Asking a model for candidate memories: the JSON schema, the prompt, strict validation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from navi_desktop.errors import NaviError
from navi_desktop.memory.models import CATEGORIES


class ModelOutputError(NaviError):
    """The model answered, but not with what the schema asks for."""


class JsonModel(Protocol):
    """The one thing extraction needs from a model server (the daemon passes its backend)."""

    async def complete_json(
        self,
        model: str,
        messages: list[dict[str, Any]],
        schema: dict[str, Any],
        options: dict[str, Any] | None = None,
    ) -> Any: ...


SOURCES = ("conversation", "tool_call", "user_explicit")

EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "subject": {"type": "string"},
                    "key": {"type": "string"},
                    "value": {"type": "string"},
                    "category": {"type": "string", "enum": list(CATEGORIES)},
                    "evidence": {"type": "string"},
                    "source": {"type": "string", "enum": list(SOURCES)},
                    "confidence": {"type": "number"},
                },
                "required": [
                    "subject",
                    "key",
                    "value",
                    "category",
                    "evidence",
                    "source",
                    "confidence",
                ],
            },
        },
        "rules": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "instruction": {"type": "string"},
                    "evidence": {"type": "string"},
                },
                "required": ["instruction", "evidence"],
            },
        },
        "summary": {"type": "string"},
    },
    "required": ["facts", "rules", "summary"],
}

EXTRACTION_PROMPT = """\
You read a conversation between a user and their assistant and write down what is worth \
remembering about the user for future conversations.

Return JSON with:
- "facts": stable facts about the user: who they are, preferences, skills, projects, the \
people and things in their life as they relate to the user. Each has "subject" ("user" or \
who it is about), "key" (a short attribute name such as "home city" or "favourite editor"), \
"value", "category" (one of: {categories}), "evidence" (an exact quote copied from the \
conversation that states it), "source" ("user_explicit" when the user asked you to remember \
it, "tool_call" when a tool result shows it, else "conversation") and "confidence" (0 to 1).
- "rules": durable instructions for how the assistant should behave from now on ("answer \
in French", "no emojis"), each with an exact "evidence" quote.
- "summary": two or three sentences on what this part of the conversation was about.

Do not include: temporary states (tired today, busy this afternoon), one-off commands \
(translate this, fix that file), file paths, secrets, or private details about other people \
that say nothing about the user. When a tool result and the chat disagree, trust the tool \
result. Write facts in the user's own language. If nothing is worth remembering, return \
empty lists. Copy evidence quotes exactly; never invent one.
"""

SUMMARY_MERGE_PROMPT = """\
These are summaries of consecutive parts of one conversation. Write one summary of the whole \
conversation in three to five sentences, in the language the parts are written in. Return \
JSON: {"summary": "..."}."""

MERGE_SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
}

PROFILE_PROMPT = """\
Write a short profile of the user from the facts below: two to four short paragraphs, \
plain prose, only what the facts say (no guesses, no advice). Return JSON: \
{"profile": "..."}."""

PROFILE_SCHEMA = {
    "type": "object",
    "properties": {"profile": {"type": "string"}},
    "required": ["profile"],
}


@dataclass(frozen=True)
class FactCandidate:
    subject: str
    key: str
    value: str
    category: str
    evidence: str
    source: str
    confidence: float


@dataclass(frozen=True)
class RuleCandidate:
    instruction: str
    evidence: str


@dataclass(frozen=True)
class Extraction:
    facts: list[FactCandidate]
    rules: list[RuleCandidate]
    summary: str


def _text(item: dict[str, Any], name: str, where: str, *, required: bool = True) -> str:
    value = item.get(name)
    if not isinstance(value, str) or (required and not value.strip()):
        raise ModelOutputError(f'{where}: "{name}" must be a non-empty string, got {value!r}')
    return value.strip()


def parse_extraction(data: Any) -> Extraction:
    """Validate a model's answer strictly: any wrong type rejects the whole answer, so nothing
    partial is written (the session stays pending and is retried)."""
    if not isinstance(data, dict):
        raise ModelOutputError(f"extraction must be a JSON object, got {type(data).__name__}")
    facts_raw, rules_raw = data.get("facts"), data.get("rules")
    if not isinstance(facts_raw, list) or not isinstance(rules_raw, list):
        raise ModelOutputError('extraction needs "facts" and "rules" lists')
    facts = []
    for n, item in enumerate(facts_raw, start=1):
        where = f"fact #{n}"
        if not isinstance(item, dict):
            raise ModelOutputError(f"{where} is not an object")
        confidence = item.get("confidence")
        if isinstance(confidence, bool) or not isinstance(confidence, int | float):
            raise ModelOutputError(f'{where}: "confidence" must be a number')
        category = item.get("category")
        if category not in CATEGORIES:
            category = "other"
        source = item.get("source") if item.get("source") in SOURCES else "conversation"
        facts.append(
            FactCandidate(
                subject=_text(item, "subject", where, required=False) or "user",
                key=_text(item, "key", where),
                value=_text(item, "value", where),
                category=category,
                evidence=_text(item, "evidence", where),
                source=source,
                confidence=min(1.0, max(0.0, float(confidence))),
            )
        )
    rules = []
    for n, item in enumerate(rules_raw, start=1):
        where = f"rule #{n}"
        if not isinstance(item, dict):
            raise ModelOutputError(f"{where} is not an object")
        rules.append(
            RuleCandidate(_text(item, "instruction", where), _text(item, "evidence", where))
        )
    summary = data.get("summary", "")
    if not isinstance(summary, str):
        raise ModelOutputError('"summary" must be a string')
    return Extraction(facts, rules, summary.strip())


def request(instructions: str, material: str) -> list[dict[str, Any]]:
    """The messages of every pipeline request: the instructions, then what to work on."""
    return [{"role": "system", "content": instructions}, {"role": "user", "content": material}]


def extraction_messages(transcript: str, categories: tuple[str, ...] = CATEGORIES) -> list[dict]:
    prompt = EXTRACTION_PROMPT.format(categories=", ".join(categories))
    return request(prompt, f"Conversation:\n\n{transcript}")
