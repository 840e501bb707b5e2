"""Plain records returned by the engine; ``to_dict()`` gives JSON-ready data."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from navi_desktop.memory.clock import now_iso

KINDS = ("fact", "episode", "rule", "reflection")
CATEGORIES = ("profile", "preferences", "technical", "projects", "relationships", "health", "other")
SOURCES = ("conversation", "tool_call", "user_explicit", "auto_discovery", "import")
STATUSES = ("active", "held", "archived", "superseded")


@dataclass(frozen=True)
class Memory:
    id: int
    kind: str
    category: str | None
    subject: str | None
    key: str | None
    value: str
    evidence: str | None
    source: str
    confidence: float
    session_id: str | None
    message_from: int | None
    message_to: int | None
    status: str
    pinned: bool
    strength: float
    mentions: int
    created_at: str
    updated_at: str
    last_used_at: str | None
    valid_from: str
    valid_to: str | None
    superseded_by: int | None
    review_reason: str | None = None
    expires_at: str | None = None  # a fact that holds until then (archived once it passed)
    last_verified_at: str | None = None  # when the user last confirmed it

    @classmethod
    def from_row(cls, row: Any) -> Memory:
        data = {name: row[name] for name in cls.__dataclass_fields__}
        data["pinned"] = bool(data["pinned"])
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def expired(self, now: str | None = None) -> bool:
        """Past its expiry (search and the prompt leave it out before maintenance archives it);
        ``now`` in the stored form."""
        return self.expires_at is not None and self.expires_at <= (now or now_iso())


@dataclass(frozen=True)
class HistoryEntry:
    id: int
    memory_id: int
    action: str
    actor: str
    at: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None

    @classmethod
    def from_row(cls, row: Any) -> HistoryEntry:
        return cls(
            id=row["id"],
            memory_id=row["memory_id"],
            action=row["action"],
            actor=row["actor"],
            at=row["at"],
            old=json.loads(row["old"]) if row["old"] else None,
            new=json.loads(row["new"]) if row["new"] else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Message:
    id: int
    session_id: str
    role: str
    name: str | None
    content: str
    created_at: str
    meta: dict[str, Any] | None = None  # tool calls, model, token counts

    @classmethod
    def from_row(cls, row: Any) -> Message:
        data = {name: row[name] for name in cls.__dataclass_fields__}
        data["meta"] = json.loads(data["meta"]) if data["meta"] else None
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Session:
    id: str
    title: str | None
    created_at: str
    last_active_at: str
    state: str
    processed_upto: int
    pending_reason: str | None
    ended_at: str | None
    preview: str | None = None  # the first thing the user said (lists only): derived, not kept

    @classmethod
    def from_row(cls, row: Any) -> Session:
        names = set(row.keys())
        return cls(**{name: row[name] for name in cls.__dataclass_fields__ if name in names})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Signal:
    """One retriever's opinion of a hit: its 1-based rank and raw score."""

    rank: int
    score: float


@dataclass(frozen=True)
class SearchHit:
    """A search result: a memory or a message, with the fused score and each signal behind it."""

    kind: str  # a memory kind, or "message"
    id: int
    text: str
    score: float
    signals: dict[str, Signal] = field(default_factory=dict)
    memory: Memory | None = None
    message: Message | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "id": self.id,
            "text": self.text,
            "score": self.score,
            "signals": {k: asdict(v) for k, v in self.signals.items()},
            "memory": self.memory.to_dict() if self.memory else None,
            "message": self.message.to_dict() if self.message else None,
        }
