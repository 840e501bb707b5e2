"""The export file ``memory.import`` takes (what ``memory.export`` gives), as models: every
field typed and bounded, so nothing of the wrong type reaches the database. What the engine
checks on top (known categories per kind, dates) it still checks."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from navi_desktop.daemon.method_params import SessionId
from navi_desktop.daemon.params import INT64_MAX, JsonObject, Params, RowId, Timestamp, Unit, text
from navi_desktop.memory.exchange import FORMAT, VERSION
from navi_desktop.memory.models import CATEGORIES, KINDS, SOURCES, STATUSES

MAX_ITEMS = 1_000_000

Text = text(100_000)
Optional = text(100_000, blank=True)  # evidence, a subject or key: may be empty in old files
Name = text(200)
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]


class HistoryItem(Params):
    action: Name
    actor: Name
    at: Timestamp | None = None
    old: JsonObject | None = None
    new: JsonObject | None = None


class MemoryItem(Params):
    id: RowId
    kind: Literal[KINDS]  # type: ignore[valid-type]
    value: Text
    category: Literal[CATEGORIES] | None = None  # type: ignore[valid-type]
    subject: Optional | None = None
    key: Optional | None = None
    evidence: Optional | None = None
    source: Literal[SOURCES] = "import"  # type: ignore[valid-type]
    confidence: Unit = 1.0
    session_id: SessionId | None = None
    status: Literal[STATUSES] = "active"  # type: ignore[valid-type]
    pinned: bool = False
    strength: Unit = 1.0
    mentions: Count = 1
    created_at: Timestamp | None = None
    updated_at: Timestamp | None = None
    last_used_at: Timestamp | None = None
    valid_from: Timestamp | None = None
    valid_to: Timestamp | None = None
    superseded_by: RowId | None = None
    review_reason: Optional | None = None
    expires_at: Timestamp | None = None  # absent in files from before expiring facts
    last_verified_at: Timestamp | None = None
    history: Annotated[list[HistoryItem], Field(max_length=100_000)] = Field(default_factory=list)


class SessionItem(Params):
    id: SessionId
    title: Optional | None = None
    created_at: Timestamp


class ExportFile(Params):
    format: Literal[FORMAT]  # type: ignore[valid-type]
    version: Literal[VERSION]  # type: ignore[valid-type]
    exported_at: Timestamp | None = None
    sessions: Annotated[list[SessionItem], Field(max_length=MAX_ITEMS)] = Field(
        default_factory=list
    )
    memories: Annotated[list[MemoryItem], Field(max_length=MAX_ITEMS)]
