"""A hanging embedding host (it takes the connection and never answers) costs a chat turn's
search one short wait, once, not the whole timeout on every turn; search goes on by words,
and uses vectors again once the host answers. The real client against the fake server."""

from __future__ import annotations

import asyncio
import logging
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
    monkeypatch.setattr(embedders, "QUERY_DEADLINE_S", 0.5)
    monkeypatch.setattr(embedders, "QUERY_PAUSE_S", 1.0)
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
            for _ in range(3):  # three turns' searches: one short wait in all
                hits = await store.search("green tea")
                assert [h.memory.value for h in hits if h.memory] == [
                    "I drink green tea every morning"
                ]
                assert "vector" not in hits[0].signals
            assert len(fake.bodies("/api/embed")) == asked + 1
            said = [r.getMessage() for r in caplog.records if "query embedding" in r.getMessage()]
            assert len(said) == 1 and "searching by words only" in said[0], said

            del fake.path_replies["/api/embed"]  # the host answers again
            await asyncio.sleep(1.1)
            hits = await store.search("green tea")
            assert "vector" in hits[0].signals
            assert len(fake.bodies("/api/embed")) == asked + 2
            assert any("works again" in r.getMessage() for r in caplog.records)


async def test_a_search_after_the_embedding_host_is_fixed_asks_it_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pause after failures was for the old host: once the user sets a working one, the
    next search uses vectors (before, it stayed words-only for up to the pause, 10 min)."""
    from tests.tui_support import Daemon, make_home

    monkeypatch.setattr(embedders, "QUERY_DEADLINE_S", 0.5)
    async with FakeOllama() as fake:
        extra = '[ollama]\nembedding_host = "http://127.0.0.1:9"\n'  # nothing listens there
        paths = make_home(tmp_path, fake.url)
        paths.config_file.write_text(
            paths.config_file.read_text()
            .replace('embedder = "none"', 'embedder = "ollama"')
            .replace("[ollama]\n", extra, 1)
        )
        daemon = await Daemon(paths).start()
        try:
            await daemon.call("memory.add", {"args": ["I drink green tea every morning"]})
            hits = await daemon.call("memory.search", {"args": ["green tea"]})
            assert "vector" not in hits[0]["signals"]  # the host is down: paused
            changes = {"ollama.embedding_host": fake.url}
            await daemon.call("settings.set", {"changes": changes})
            await daemon.call("memory.add", {"args": ["tea is green"]})  # embeds what waits
            async with asyncio.timeout(5):  # the pause was 30 s
                while "vector" not in hits[0]["signals"]:
                    await asyncio.sleep(0.2)
                    hits = await daemon.call("memory.search", {"args": ["green tea"]})
        finally:
            await daemon.stop()
