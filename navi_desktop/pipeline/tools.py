"""Memory tools offered to a chat model that supports tool calls.

Results are short JSON so a small model can read them; a bad call gets an error it can fix
(arguments are checked against each tool's schema first: :mod:`.tool_args`). Forgetting and
correcting are the user's decisions: a call that no request in the user's last message backs
is refused, and the refusal is noted on the tool's message in the session (:mod:`.user_intent`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import NaviError, NotFound
from navi_desktop.expiry import in_days
from navi_desktop.memory.documents import memory_text
from navi_desktop.memory.models import CATEGORIES, KINDS
from navi_desktop.paths import profile_flag
from navi_desktop.pipeline.policy import asks_to_remember, is_sensitive
from navi_desktop.pipeline.tool_args import BadArguments, fit_arguments
from navi_desktop.pipeline.user_intent import (
    asks_to_correct,
    asks_to_forget,
    evidence_for,
    states_value,
)

if TYPE_CHECKING:
    from navi_desktop.memory.store import MemoryStore


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


TOOLS: list[dict[str, Any]] = [
    _tool(
        "memory_search",
        "Search what you remember about the user.",
        {
            "query": {"type": "string", "description": "what to look for"},
            "limit": {"type": "integer", "description": "at most this many (default 5)"},
        },
        ["query"],
    ),
    _tool(
        "memory_save",
        "Remember a fact about the user, or a standing instruction, because the user asked you to.",
        {
            "key": {"type": "string", "description": "short attribute name, e.g. home city"},
            "value": {"type": "string"},
            "category": {"type": "string", "enum": list(CATEGORIES)},
            "kind": {"type": "string", "enum": ["fact", "rule"]},
            "expires_days": {
                "type": "integer",
                "description": "only for a fact the user says holds for a while (e.g. 'this"
                " week': 7): days until it stops being true",
            },
        },
        ["value"],
    ),
    _tool(
        "memory_confirm",
        "Mark a remembered fact as confirmed when the user says it is still true: it is"
        " pinned and fully trusted.",
        {"id": {"type": "integer", "description": "the fact's id, from memory_search"}},
        ["id"],
    ),
    _tool(
        "memory_forget",
        "Forget a memory for good, by id (find it with memory_search). Only when the user's"
        " message asks you to forget or delete it: never on your own.",
        {"id": {"type": "integer", "description": "the memory's id, from memory_search"}},
        ["id"],
    ),
    _tool(
        "memory_correct",
        "Replace a remembered fact with its new value when the user tells you it changed"
        " (e.g. they moved to Porto); the old value stays in history. Only when the user's"
        " message asks for the change or states the new value: never on your own.",
        {
            "id": {"type": "integer", "description": "the memory's id, from memory_search"},
            "value": {"type": "string", "description": "the new value, e.g. Porto"},
        },
        ["id", "value"],
    ),
    _tool(
        "memory_stats",
        "Count what you remember: memories by kind, facts by category, how many wait for the"
        " user's review, and when the newest was saved.",
        {},
        [],
    ),
    _tool(
        "memory_list",
        "List what you remember, newest first.",
        {"category": {"type": "string", "enum": list(CATEGORIES)}, "limit": {"type": "integer"}},
        [],
    ),
    _tool(
        "memory_entity",
        "Everything you remember about a person, place, project or thing, by its name: its"
        " other names and the facts and session summaries that mention it.",
        {"name": {"type": "string", "description": "its name, e.g. Joana or Lisbon"}},
        ["name"],
    ),
]

ENTITY_FACTS = 10  # what memory_entity lists: a small model's context is short
ENTITY_SUMMARIES = 3
TOOL_NAMES = frozenset(t["function"]["name"] for t in TOOLS)
_SPECS = {t["function"]["name"]: t for t in TOOLS}
FORGOTTEN = (
    "not saved: the user made Navi forget this, and only the user can bring it back, by hand"
    " (navi memory add, or the memory inspector). Do not try to save it again."
)


class MemoryTools:
    """Runs the memory tools for one session. ``changed`` collects the ids a call changed, so
    the daemon can tell subscribers; ``take_note()`` gives what the last call's message in the
    session should record (a refusal), once."""

    def __init__(self, store: MemoryStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self.changed: list[int] = []
        self._note: dict[str, Any] | None = None

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        self._note = None
        handler = getattr(self, f"_{name}", None)
        if name not in TOOL_NAMES or handler is None:
            known = ", ".join(sorted(TOOL_NAMES))
            return _json({"error": f"unknown tool {name!r}; the memory tools are {known}"})
        try:
            return _json(await handler(**fit_arguments(_SPECS[name], arguments)))
        except (TypeError, ValueError) as exc:  # BadArguments, or a handler's own check
            return _json({"error": f"bad arguments for {name}: {exc}"})
        except NaviError as exc:
            return _json({"error": str(exc)})

    def take_note(self) -> dict[str, Any] | None:
        """Meta for the last call's tool message (``{"refused": why}``), or None."""
        note, self._note = self._note, None
        return note

    async def _user_request(self) -> str:
        """The user's last message in this session: the request a forget or correct needs."""
        recent = await self.store.messages(self.session_id, last=20)
        return next((m.content for m in reversed(recent) if m.role == "user"), "")

    def _refuse(self, reason: str, advice: str) -> dict[str, Any]:
        self._note = {"refused": reason}
        return {"error": f"refused: {reason}. {advice}"}

    async def _memory_search(self, query: str, limit: int = 5) -> dict[str, Any]:
        hits = await self.store.search(
            str(query), limit=max(1, min(int(limit), 20)), kinds=["fact", "rule", "episode"]
        )
        return {"results": [{"id": h.id, "kind": h.kind, "text": h.text} for h in hits]}

    async def _memory_save(
        self,
        value: str,
        key: str | None = None,
        category: str | None = None,
        kind: str = "fact",
        expires_days: int | None = None,
    ) -> dict[str, Any]:
        if kind not in ("fact", "rule"):
            return {"error": "kind must be fact or rule"}
        expires = None if expires_days is None else in_days(expires_days, "expires_days")
        category = (category or "other") if kind == "fact" else None
        held = _held_why(await self._user_request(), kind, category, key or "", str(value))
        result = await self.store.add_memory(
            str(value),
            kind=kind,
            key=key or None,
            category=category,
            source="conversation" if held == UNASKED else "user_explicit",
            status="held" if held else "active",
            review_reason=held,
            session_id=self.session_id,
            actor="assistant",  # a tool call never lifts a tombstone: only the user, by hand
            expires_at=expires,
        )
        if result.memory is None:
            return {"saved": False, "reason": result.action, "message": FORGOTTEN}
        self.changed.append(result.memory.id)
        if result.memory.status == "held":  # this save's, or that of the same one held before
            why = result.memory.review_reason
            return {"saved": False, "held_for_review": True, "id": result.memory.id, "why": why}
        return {"saved": True, "id": result.memory.id, "action": result.action}

    async def _memory_confirm(self, id: int) -> dict[str, Any]:
        memory = await self.store.confirm(id, actor="assistant")
        self.changed.append(memory.id)
        return {"confirmed": True, "id": memory.id, "text": memory_text(memory)}

    async def _memory_forget(self, id: int) -> dict[str, Any]:
        if not asks_to_forget(await self._user_request()):
            return self._refuse(
                "the user's last message does not ask to forget anything",
                "Forget only when the user asks you to; if a memory looks wrong, ask them.",
            )
        # A short or common value matched everywhere could take unrelated text with it: that
        # needs the user's own confirmation, where they see what would go.
        preview = await self.store.forget_preview(int(id))
        if preview.broad:
            return {
                "error": f"not forgotten: {preview.broad}, so removing it everywhere needs the"
                f" user's confirmation. Ask the user to forget #{int(id)} in the memory"
                f" inspector (F3), or with `navi memory forget {int(id)}"
                f"{profile_flag(self.store.profile)}`, which show where it"
                " occurs."
            }
        report = await self.store.forget(int(id))
        self.changed.extend(report.forgotten)
        return {"forgotten": report.forgotten}

    async def _memory_correct(self, id: int, value: str) -> dict[str, Any]:
        value = value.strip()
        if not value:
            raise BadArguments("value must be the new value as text, e.g. Porto")
        request = await self._user_request()
        if not asks_to_correct(request, value):
            return self._refuse(
                f"the user's last message neither asks for a change nor says {value!r}",
                "Correct a memory only when the user tells you it changed; otherwise ask them.",
            )
        old = await self.store.get(id)
        if old.kind not in ("fact", "rule"):
            raise BadArguments(
                f"memory {id} is of kind {old.kind!r}: only a fact or a rule can be corrected"
                " (find the fact with memory_search)"
            )
        evidence = evidence_for(request, value)
        if await self.store.is_forgotten(
            value, subject=old.subject, key=old.key, kind=old.kind
        ) or await self.store.contains_forgotten([evidence]):
            return {"corrected": False, "message": FORGOTTEN}
        new = await self.store.correct(id, value, evidence=evidence, actor="assistant")
        self.changed.extend([id, new.id])
        return {"corrected": True, "id": new.id, "replaced": id, "text": memory_text(new)}

    async def _memory_stats(self) -> dict[str, Any]:
        stats = await self.store.stats()
        newest, _ = await self.store.list_memories(sort="created", limit=1)
        by_kind: dict[str, dict[str, int]] = stats["memories"]
        return {
            "current": {kind: by_kind.get(kind, {}).get("active", 0) for kind in KINDS},
            "facts_by_category": stats["facts_by_category"],
            "held_for_review": sum(s.get("held", 0) for s in by_kind.values()),
            "pinned": stats["pinned"],
            "sessions": stats["sessions"],
            "newest_memory_at": newest[0].created_at if newest else None,
        }

    async def _memory_list(self, category: str | None = None, limit: int = 10) -> dict[str, Any]:
        memories, total = await self.store.list_memories(
            category=category, limit=max(1, min(int(limit), 50)), current=True
        )
        return {
            "total": total,
            "memories": [{"id": m.id, "kind": m.kind, "text": memory_text(m)} for m in memories],
        }

    async def _memory_entity(self, name: str) -> dict[str, Any]:
        try:
            entity = await self.store.entity(name, limit=ENTITY_FACTS)
        except NotFound as exc:  # the model's way on: search the words instead
            return {"error": f"{exc} (memory_search finds memories by any words)"}
        return {
            "name": entity.name,
            "type": entity.type,
            "aliases": entity.aliases,
            "mentions": entity.mentions,
            "facts": [{"id": m.id, "text": memory_text(m)} for m in entity.facts],
            "facts_total": entity.facts_total,
            "summaries": [
                {"id": m.id, "text": _clip(m.value)} for m in entity.episodes[:ENTITY_SUMMARIES]
            ],
            "summaries_total": entity.episodes_total,
        }


def _clip(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False)


UNASKED = "saved by the model, not said by you: it waits for your review"
SENSITIVE = "sensitive (health, relationships, money, identity): it waits for your review"


def _held_why(request: str, kind: str, category: str | None, key: str, value: str) -> str | None:
    """Why a save the model made waits for the user's review, or None to keep it now. The
    model saved rules and health facts nobody asked for, as the user's own: only what the
    user's last message says (or asks to remember) is theirs, and a sensitive fact they did
    not ask to remember waits, as it does when learned at a session's end."""
    asked = asks_to_remember(request)
    if not (asked or states_value(request, value)):
        return UNASKED
    if kind == "fact" and not asked and is_sensitive(category, key, value):
        return SENSITIVE
    return None
