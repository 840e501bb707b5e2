"""What a scrub changes, decided from rows: the same on every backend. Each backend fetches
the rows (scrub.py, pg/scrub.py), these functions decide what each one becomes, and the
backend writes the plan."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from navi_desktop.memory.matching import Matcher

# A memory's texts a forget redacts (the reason it waits for review too: a client sets it).
MEMORY_COLUMNS = ("value", "evidence", "subject", "key", "review_reason")

# Every column that can hold the user's words, with whether its values are JSON (matched as the
# strings in them): what a forget's scrub reaches, and what a restore reads for phrases
# forgotten after its copy was made. tests/test_scrub_places.py holds every other text column
# of the schema to account, so a new one cannot be missed.
TEXT_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("messages", "content", False),
    ("messages", "meta", True),
    ("sessions", "title", False),
    ("sessions", "pending_reason", False),
    *(("memories", column, False) for column in MEMORY_COLUMNS),
    ("memory_history", "old", True),
    ("memory_history", "new", True),
    ("meta", "value", False),
    ("entities", "name", False),
    ("entities", "norm", False),
    ("entity_aliases", "name", False),
    ("entity_aliases", "norm", False),
    ("reply_feedback", "note", False),
)


def counted(count: int, one: str, many: str) -> str:
    """``count`` things in words: "1 message", "4 messages"."""
    return f"{count} {one if count == 1 else many}"


@dataclass
class ScrubCounts:
    """Where a scrub changes something, by place."""

    messages: int = 0
    sessions: int = 0  # the sessions those messages belong to
    titles: int = 0
    summaries: int = 0
    reflections: int = 0
    memories: int = 0  # other facts and rules, redacted in place
    also_forgotten: list[int] = field(default_factory=list)  # same value: forgotten too
    history: int = 0
    entities: int = 0
    notes: int = 0  # notes on reply ratings
    profile_summary: bool = False

    def lines(self) -> list[str]:
        """The places in words, for a preview or a report ("4 messages in 3 sessions")."""
        out = []
        if self.messages:
            out.append(
                counted(self.messages, "message", "messages")
                + f" in {counted(self.sessions, 'session', 'sessions')}"
            )
        if self.titles:
            out.append(counted(self.titles, "session title", "session titles"))
        if self.summaries:
            out.append(counted(self.summaries, "session summary", "session summaries"))
        if self.reflections:
            out.append(counted(self.reflections, "reflection", "reflections"))
        if self.profile_summary:
            out.append("the profile summary")
        if self.memories:
            out.append(counted(self.memories, "other memory", "other memories") + " (redacted)")
        if self.also_forgotten:
            ids = ", ".join(f"#{i}" for i in self.also_forgotten)
            same = counted(len(self.also_forgotten), "memory", "memories")
            out.append(f"{same} with the same value ({ids}), forgotten too")
        if self.history:
            out.append(counted(self.history, "history row", "history rows") + " of other memories")
        if self.entities:
            out.append(counted(self.entities, "entity name", "entity names"))
        if self.notes:
            out.append(counted(self.notes, "note on a rated reply", "notes on rated replies"))
        return out


@dataclass
class ScrubPlan:
    """Every change a scrub makes; computed and applied in one transaction."""

    matcher: Matcher
    sample_limit: int = 0
    messages: dict[int, tuple[str, str | None]] = field(default_factory=dict)
    following: set[int] = field(default_factory=set)  # their next messages: context re-indexed
    sessions: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    memories: dict[int, dict[str, Any]] = field(default_factory=dict)
    also_forgotten: list[Any] = field(default_factory=list)  # rows
    history: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)
    entities: list[int] = field(default_factory=list)
    notes: dict[int, str | None] = field(default_factory=dict)  # reply_feedback.message_id
    aliases: list[str] = field(default_factory=list)  # entity_aliases.norm
    samples: list[str] = field(default_factory=list)
    counts: ScrubCounts = field(default_factory=ScrubCounts)

    def sample(self, text: str | None, where: str) -> None:
        if len(self.samples) < self.sample_limit and text and (cut := self.matcher.snippet(text)):
            self.samples.append(f"{where}: {cut}")

    # -- each place, from its rows (those a backend's prefilter kept, or all) ------------------

    def add_messages(self, rows: Iterable[Any]) -> None:
        """Messages (id, session_id, role, content, meta); ``following`` is the backend's."""
        sessions: set[str] = set()
        for row in rows:
            content, n = self.matcher.redact(row["content"])
            meta, m = self.matcher.redact_json(row["meta"])
            if n or m:
                self.sample(row["content"] if n else row["meta"], f"{row['role']} message")
                self.messages[row["id"]] = (content or "", meta)
                sessions.add(row["session_id"])
        self.counts.messages = len(self.messages)
        self.counts.sessions = len(sessions)

    def add_sessions(self, rows: Iterable[Any]) -> None:
        """Sessions (id, title, pending_reason)."""
        for row in rows:
            title, n = self.matcher.redact(row["title"])
            reason, m = self.matcher.redact(row["pending_reason"])
            if n or m:
                self.sample(row["title"], "session title")
                self.sessions[row["id"]] = (title, reason)
                self.counts.titles += bool(n)

    def add_memories(self, rows: Iterable[Any], skip: set[int], same_values: set[str]) -> None:
        """Memories other than ``skip``: forgotten too when their value is one of
        ``same_values``, else redacted in place."""
        for row in rows:
            if row["id"] in skip:
                continue
            if same_values and self.matcher.form(row["value"]) in same_values:
                self.also_forgotten.append(row)
                self.counts.also_forgotten.append(row["id"])
                continue
            changes = {}
            for column in MEMORY_COLUMNS:
                new, n = self.matcher.redact(row[column])
                if n:
                    changes[column] = new
            if changes:
                kind = row["kind"]
                self.sample(row["value"], kind)
                self.memories[row["id"]] = changes
                if kind == "episode":
                    self.counts.summaries += 1
                elif kind == "reflection":
                    self.counts.reflections += 1
                else:
                    self.counts.memories += 1

    def add_history(self, rows: Iterable[Any], skip: set[int]) -> None:
        """History rows (id, memory_id, old, new) of memories that stay."""
        gone = skip | {r["id"] for r in self.also_forgotten}
        for row in rows:
            if row["memory_id"] in gone:
                continue
            old, n = self.matcher.redact_json(row["old"], ensure_ascii=False)
            new, m = self.matcher.redact_json(row["new"], ensure_ascii=False)
            if n or m:
                self.history[row["id"]] = (old, new)
        self.counts.history = len(self.history)

    def add_meta(self, rows: Iterable[Any]) -> None:
        """Metadata (key, value) other than the tombstone key and the pending scrubs."""
        for row in rows:
            new, n = self.matcher.redact(row["value"])
            if n:
                self.sample(row["value"], row["key"].replace("_", " "))
                self.meta[row["key"]] = new or ""
                self.counts.profile_summary |= row["key"] == "profile_summary"

    def add_entities(self, entities: Iterable[Any], aliases: Iterable[Any]) -> None:
        """Entities (id, name, norm) and aliases (entity_id, name, norm) naming the text."""
        for row in entities:
            if self.matcher.spans(row["name"]) or self.matcher.spans(row["norm"]):
                self.entities.append(row["id"])
        for row in aliases:
            if row["entity_id"] not in self.entities and (
                self.matcher.spans(row["name"]) or self.matcher.spans(row["norm"])
            ):
                self.aliases.append(row["norm"])
        self.counts.entities = len(self.entities) + len(self.aliases)

    def add_notes(self, rows: Iterable[Any]) -> None:
        """Notes on rated replies (message_id, note)."""
        for row in rows:
            note, n = self.matcher.redact(row["note"])
            if n:
                self.sample(row["note"], "note on a rated reply")
                self.notes[row["message_id"]] = note
        self.counts.notes = len(self.notes)
