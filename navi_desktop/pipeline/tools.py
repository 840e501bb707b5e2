"""Memory tools offered to a chat model that supports tool calls.

Results are short JSON so a small model can read them; a bad call gets an error it can fix.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from navi_desktop.errors import NaviError
from navi_desktop.memory.documents import memory_text
from navi_desktop.memory.models import CATEGORIES

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
        },
        ["value"],
    ),
    _tool(
        "memory_forget",
        "Forget a memory by id, because the user asked you to.",
        {"id": {"type": "integer"}},
        ["id"],
    ),
    _tool(
        "memory_list",
        "List what you remember, newest first.",
        {"category": {"type": "string", "enum": list(CATEGORIES)}, "limit": {"type": "integer"}},
        [],
    ),
]

TOOL_NAMES = frozenset(t["function"]["name"] for t in TOOLS)
FORGOTTEN = (
    "not saved: the user made Navi forget this, and only the user can bring it back, by hand"
    " (navi memory add, or the memory inspector). Do not try to save it again."
)


class MemoryTools:
    """Runs the memory tools for one session. ``changed`` collects the ids a call changed, so
    the daemon can tell subscribers."""

    def __init__(self, store: MemoryStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self.changed: list[int] = []

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        handler = getattr(self, f"_{name}", None)
        if name not in TOOL_NAMES or handler is None:
            return _json({"error": f"unknown tool {name!r}"})
        try:
            return _json(await handler(**arguments))
        except (TypeError, ValueError) as exc:  # missing/unknown names, or e.g. int("many")
            return _json({"error": f"bad arguments for {name}: {exc}"})
        except NaviError as exc:
            return _json({"error": str(exc)})

    async def _memory_search(self, query: str, limit: int = 5) -> dict[str, Any]:
        hits = await self.store.search(
            str(query), limit=max(1, min(int(limit), 20)), kinds=["fact", "rule", "episode"]
        )
        return {"results": [{"id": h.id, "kind": h.kind, "text": h.text} for h in hits]}

    async def _memory_save(
        self, value: str, key: str | None = None, category: str | None = None, kind: str = "fact"
    ) -> dict[str, Any]:
        if kind not in ("fact", "rule"):
            return {"error": "kind must be fact or rule"}
        result = await self.store.add_memory(
            str(value),
            kind=kind,
            key=key or None,
            category=(category or "other") if kind == "fact" else None,
            source="user_explicit",
            session_id=self.session_id,
            actor="assistant",  # a tool call never lifts a tombstone: only the user, by hand
        )
        if result.memory is None:
            return {"saved": False, "reason": result.action, "message": FORGOTTEN}
        self.changed.append(result.memory.id)
        return {"saved": True, "id": result.memory.id, "action": result.action}

    async def _memory_forget(self, id: int) -> dict[str, Any]:
        # A short or common value matched everywhere could take unrelated text with it: that
        # needs the user's own confirmation, where they see what would go.
        preview = await self.store.forget_preview(int(id))
        if preview.broad:
            return {
                "error": f"not forgotten: {preview.broad}, so removing it everywhere needs the"
                f" user's confirmation. Ask the user to forget #{int(id)} in the memory"
                f" inspector (F3), or with `navi memory forget {int(id)}`, which show where it"
                " occurs."
            }
        report = await self.store.forget(int(id))
        self.changed.extend(report.forgotten)
        return {"forgotten": report.forgotten}

    async def _memory_list(self, category: str | None = None, limit: int = 10) -> dict[str, Any]:
        memories, total = await self.store.list_memories(
            category=category, limit=max(1, min(int(limit), 50))
        )
        return {
            "total": total,
            "memories": [{"id": m.id, "kind": m.kind, "text": memory_text(m)} for m in memories],
        }


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False)
