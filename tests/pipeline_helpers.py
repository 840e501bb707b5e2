"""Shared pieces for the memory-pipeline tests: a real OllamaBackend against the fake Ollama,
a real MemoryStore file, and builders for the extraction model's scripted JSON answers."""

from __future__ import annotations

import json
from typing import Any

from navi_desktop.llm.backend import OllamaBackend
from navi_desktop.memory.store import MemoryStore
from navi_desktop.pipeline.session_end import EndReport, EndSettings, end_session
from tests.fake_ollama import FakeModel, FakeOllama, Reply

MODEL = "llama3.2"  # completion + tools
NO_TOOLS_MODEL = "gemma2"  # completion only
MODELS = [
    FakeModel(MODEL),
    FakeModel(NO_TOOLS_MODEL, ("completion",), "gemma2", "2.6B"),
]
SETTINGS = EndSettings(model=MODEL)


def make_backend(fake: FakeOllama, *, timeout: float = 3.0) -> OllamaBackend:
    return OllamaBackend(
        fake.url, timeout=timeout, connect_timeout=1, chunk_timeout=1, probe_timeout=2
    )


async def open_store(tmp_path: Any, name: str = "memory.db") -> MemoryStore:
    return await MemoryStore.open(tmp_path / name)


def fact(
    key: str,
    value: str,
    evidence: str,
    *,
    category: str = "preferences",
    confidence: float = 0.9,
    source: str = "conversation",
    subject: str = "user",
) -> dict[str, Any]:
    return {
        "subject": subject,
        "key": key,
        "value": value,
        "category": category,
        "evidence": evidence,
        "source": source,
        "confidence": confidence,
    }


def rule(instruction: str, evidence: str) -> dict[str, Any]:
    return {"instruction": instruction, "evidence": evidence}


def extraction(
    facts: list[dict[str, Any]] | None = None,
    rules: list[dict[str, Any]] | None = None,
    summary: str = "",
) -> Reply:
    """The extraction model's answer for one chunk."""
    return Reply(
        content=json.dumps({"facts": facts or [], "rules": rules or [], "summary": summary})
    )


def profile(text: str) -> Reply:
    return Reply(content=json.dumps({"profile": text}))


def merged(summary: str) -> Reply:
    return Reply(content=json.dumps({"summary": summary}))


def chat_bodies(fake: FakeOllama) -> list[dict[str, Any]]:
    return fake.bodies("/api/chat")


def prompt_of(body: dict[str, Any]) -> str:
    """The user-side text of one /api/chat request (the transcript for an extraction)."""
    return "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")


async def say(store: MemoryStore, session_id: str, *turns: tuple[str, str]) -> list[int]:
    """Save (role, content) turns; returns the message ids."""
    return [(await store.save_message(session_id, role, text)).id for role, text in turns]


async def new_session(store: MemoryStore, *turns: tuple[str, str], sid: str | None = None) -> str:
    session = await store.create_session("test", session_id=sid)
    await say(store, session.id, *turns)
    return session.id


async def memory_rows(store: MemoryStore) -> list[dict[str, Any]]:
    """Every memory row, every column: what a failure must leave untouched."""
    async with store.db.reading():
        rows = await store.db.fetchall("SELECT * FROM memories ORDER BY id")
    return [dict(r) for r in rows]


async def facts_by_key(store: MemoryStore, key: str) -> list[dict[str, Any]]:
    return [r for r in await memory_rows(store) if r["kind"] == "fact" and r["key"] == key]


async def learn(
    store: MemoryStore,
    llm: OllamaBackend,
    fake: FakeOllama,
    turns: Any,
    *replies: Any,
    sid: str | None = None,
    settings: EndSettings = SETTINGS,
) -> tuple[str, EndReport]:
    """A new session with ``turns``, ended with ``replies`` scripted."""
    session_id = await new_session(store, *turns, sid=sid)
    fake.script(*replies)
    return session_id, await end_session(store, llm, session_id, settings)


async def found_by_meaning(store: Any, value: str, prefix: str = "") -> bool:
    """The memory ``value`` is the vector signal's first hit for its own text (after
    ``prefix``)."""
    hits = await store.search(prefix + value)
    hit = next(h for h in hits if h.memory is not None and h.memory.value == value)
    return "vector" in hit.signals and hit.signals["vector"].rank == 1
