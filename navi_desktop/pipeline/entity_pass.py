"""The accurate entity pass, run by maintenance: the chat model names the people,
organisations, projects and locations in memories the regex fast path found few entities in.

Only names written in the memory's own text are kept (a model's invention has nothing to
link to), and only with a known type. Maintenance runs on profiles only: an incognito
session has no store to enrich, so this never runs for one.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from navi_desktop.memory.documents import memory_text
from navi_desktop.memory.entity_enrichment import ENTITY_TYPES
from navi_desktop.memory.textproc import STOPWORDS, normalize
from navi_desktop.pipeline.extraction import EXTRACT_OPTIONS, JsonModel, request

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore
    from navi_desktop.pipeline.session_end import EndSettings

log = logging.getLogger(__name__)

BATCH = 8  # texts per request: short prompts suit small models
PER_RUN = 32  # memories read per maintenance run: the model is shared with chat
TEXT_CHARS = 400
MAX_NAME = 80
ENTITY_PROMPT = """\
List the names in each numbered text: people, organisations, projects and locations. \
Copy each name exactly as written in the text; never add one that is not there. \
Return JSON: {"entities": [{"text": <number>, "name": "...", "type": "person"}]}. \
Example: 1. "Met Dana from Kestrel Labs in Oslo." gives \
{"entities": [{"text": 1, "name": "Dana", "type": "person"}, \
{"text": 1, "name": "Kestrel Labs", "type": "organisation"}, \
{"text": 1, "name": "Oslo", "type": "location"}]}"""
MODEL_TYPES = ENTITY_TYPES[:4]  # "other" is for the user to choose, not the model


def entity_schema(texts: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "entities": {
                "type": "array",
                "maxItems": 4 * texts,
                "items": {
                    "type": "object",
                    "properties": {
                        "text": {"type": "integer", "minimum": 1, "maximum": texts},
                        "name": {"type": "string", "maxLength": MAX_NAME},
                        "type": {"type": "string", "enum": list(MODEL_TYPES)},
                    },
                    "required": ["text", "name", "type"],
                },
            }
        },
        "required": ["entities"],
    }


def grounded(name: Any, kind: Any, text: str) -> tuple[str, str] | None:
    """(name, type) when the name is written in ``text`` as a whole word sequence and the
    type is known; None otherwise."""
    if not isinstance(name, str) or kind not in MODEL_TYPES:
        return None
    name = " ".join(name.split()).strip(".,;:!?\"'()[]{} ")
    norm = normalize(name)
    if len(norm) < 2 or len(name) > MAX_NAME or all(w in STOPWORDS for w in norm.split()):
        return None
    if not re.search(rf"(?<!\w){re.escape(norm)}(?!\w)", normalize(text)):
        return None
    return name, kind


def read_answer(answer: Any, texts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """The grounded (name, type) pairs for each text; anything malformed is left out."""
    found: list[list[tuple[str, str]]] = [[] for _ in texts]
    items = answer.get("entities") if isinstance(answer, dict) else None
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        index = item.get("text")
        if not isinstance(index, int) or isinstance(index, bool) or not 1 <= index <= len(texts):
            continue
        pair = grounded(item.get("name"), item.get("type"), texts[index - 1])
        known = {normalize(n) for n, _ in found[index - 1]}
        if pair is not None and normalize(pair[0]) not in known:
            found[index - 1].append(pair)
    return found


async def find_entities(
    llm: JsonModel, settings: EndSettings, texts: Sequence[str]
) -> list[list[tuple[str, str]]]:
    """One request for up to ``BATCH`` texts: their grounded (name, type) pairs."""
    listing = "\n".join(f'{n}. "{t[:TEXT_CHARS]}"' for n, t in enumerate(texts, 1))
    options = {**EXTRACT_OPTIONS, **(settings.options or {})}
    # Loose: each item is checked here, so one bad item does not cost the others.
    answer = await llm.complete_json_loose(
        settings.model, request(ENTITY_PROMPT, listing), entity_schema(len(texts)), options
    )
    return read_answer(answer.value, texts)


async def enrich_entities(store: MemoryStore, llm: JsonModel, settings: EndSettings) -> int:
    """Read up to ``PER_RUN`` memories that have few entities; returns the links added. A
    failed request leaves its memories for the next run (they are not marked read)."""
    memories = await store.needing_entities(limit=PER_RUN)
    added = 0
    for start in range(0, len(memories), BATCH):
        batch = memories[start : start + BATCH]
        found = await find_entities(llm, settings, [memory_text(m) for m in batch])
        added += await store.save_model_entities(
            {m.id: pairs for m, pairs in zip(batch, found, strict=True)}, settings.model
        )
    if memories:
        log.info("entity pass: %d memories read, %d links added", len(memories), added)
    return added
