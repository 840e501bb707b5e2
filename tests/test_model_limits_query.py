"""A hanging embedding host (it takes the connection and never answers) costs a chat turn's
search one short wait, once, not the whole timeout on every turn; search goes on by words,
and uses vectors again once the host answers. The real client against the fake server."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from navi_desktop.llm.backend import OllamaBackend
from navi_desktop.memory import embedders
from navi_desktop.memory.embedders import OllamaEmbedder
from navi_desktop.memory.store import MemoryStore
from tests.fake_ollama import FakeOllama, Reply

EMBED_MODEL = "nomic-embed-text"


async def test_a_hanging_embedder_costs_one_short_wait_then_search_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(embedders, "QUERY_DEADLINE_S", 0.5, raising=False)
    monkeypatch.setattr(embedders, "QUERY_PAUSE_S", 1.0, raising=False)
    async with (
        FakeOllama() as fake,
        OllamaBackend(fake.url, timeout=3) as backend,  # a batch of documents may take this
    ):
        embedder = OllamaEmbedder(EMBED_MODEL, backend.embed_fn)
        async with await MemoryStore.open(tmp_path / "memory.db", embedder=embedder) as store:
            await store.add_memory("I drink green tea every morning")
            await store.backfill_embeddings()
            fake.path_replies["/api/embed"] = Reply(hang=True)
            asked = len(fake.bodies("/api/embed"))
            caplog.set_level(logging.INFO, "navi_desktop.memory.embedders")
            started = time.monotonic()
            for _ in range(3):  # three turns' searches: one short wait in all
                hits = await store.search("green tea")
                assert [h.memory.value for h in hits if h.memory] == [
                    "I drink green tea every morning"
                ]
                assert "vector" not in hits[0].signals
            assert time.monotonic() - started < 1.5
            assert len(fake.bodies("/api/embed")) == asked + 1
            said = [r.getMessage() for r in caplog.records if "query embedding" in r.getMessage()]
            assert len(said) == 1 and "searching by words only" in said[0], said

            del fake.path_replies["/api/embed"]  # the host answers again
            await asyncio.sleep(1.1)
            hits = await store.search("green tea")
            assert "vector" in hits[0].signals
            assert len(fake.bodies("/api/embed")) == asked + 2
            assert any("works again" in r.getMessage() for r in caplog.records)
