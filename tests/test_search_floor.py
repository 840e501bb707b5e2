"""Search says "no matches": a memory that only the vector signal found must be close enough
to the query (a floor per embedding model, or the first few nearest when the model was not
tuned), so gibberish matches nothing and a chat turn's memory block is not padded."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from navi_desktop.memory import MemoryStore, search
from navi_desktop.memory.embedders import normalized
from navi_desktop.pipeline.context import build_context

FACTS = ["green tea, no sugar", "Lisbon", "a nurse", "a cat named Miso", "running"]
DIM = 400  # cosines of random directions: 1/20 standard deviation; "chance" is 0.15


class ScriptedEmbedder:
    """Each fact points along its own axis; a query's cosine with each fact is scripted."""

    def __init__(self, model: str, queries: dict[str, Sequence[float]]) -> None:
        self.model = model
        self.queries = queries

    async def embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        out = []
        for text in texts:
            if query:
                cosines = list(self.queries[text])
                rest = max(0.0, 1.0 - sum(c * c for c in cosines))
                pad = [0.0] * (DIM - len(FACTS) - 1)
                out.append([*cosines, *pad, rest**0.5])  # the last axis makes it unit length
            else:
                out.append([float(text.endswith(f)) for f in FACTS] + [0.0] * (DIM - len(FACTS)))
        return normalized(out)


QUERIES = {
    "zzzqqq": [0.7, 0.6, 0.3, 0.2, 0.1],  # near-ish everything, as anisotropic models are
    "what do I sip in the morning?": [0.9, 0.5, 0.2, 0.1, 0.1],
    "Lisbon": [-0.2, -0.3, -0.1, -0.1, -0.1],
    "nothing alike": [-0.3, -0.2, -0.1, -0.4, -0.1],
    "as if at random": [0.12, 0.1, -0.05, 0.08, 0.03],  # what a random direction gets
}


async def open_store(tmp_path, model: str) -> MemoryStore:
    store = await MemoryStore.open(
        tmp_path / "memory.db", embedder=ScriptedEmbedder(model, QUERIES)
    )
    for n, value in enumerate(FACTS):
        await store.add_memory(value, category="preferences", key=f"k{n}")
    await store.backfill_embeddings()
    return store


def values(hits) -> list[str]:
    return [h.memory.value for h in hits]


@pytest.fixture
def tuned(monkeypatch):
    monkeypatch.setitem(search.VECTOR_FLOOR, "test/tuned", 0.8)
    return "test/tuned"


async def test_a_tuned_model_matches_only_what_is_close(tmp_path, tuned):
    async with await open_store(tmp_path, tuned) as store:
        assert await store.search("zzzqqq") == []
        assert values(await store.search("what do I sip in the morning?")) == [FACTS[0]]
        # words in common are evidence enough, whatever the cosine
        assert values(await store.search("Lisbon")) == ["Lisbon"]


async def test_an_untuned_model_keeps_its_first_few_nearest(tmp_path):
    async with await open_store(tmp_path, "test/untuned") as store:
        assert values(await store.search("zzzqqq")) == FACTS[:3]
        assert await store.search("nothing alike") == []  # an opposite is never a match
        assert await store.search("as if at random") == []  # nor what chance gives


async def test_the_memory_block_is_not_padded(tmp_path, tuned):
    async with await open_store(tmp_path, tuned) as store:
        context = await build_context(
            store, user_text="zzzqqq", history=[], session_id=None, first_turn=True
        )
        assert context.injections == []
        assert not any(f in context.messages[0]["content"] for f in FACTS)
        asked = await build_context(
            store,
            user_text="what do I sip in the morning?",
            history=[],
            session_id=None,
            first_turn=True,
        )
        assert [i.memory.value for i in asked.injections] == [FACTS[0]]
