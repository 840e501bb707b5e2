"""A model that answers at another size than the vectors a profile holds (one replaced under
its name, a server that once gave a vector of another size): the embedding pass makes every
such vector again at the size the model gives now, replacing the old row, and search by
meaning finds those memories again. The real ollama client against the fake Ollama server, a
real SQLite file and a real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import tests.fake_ollama as fo
from navi_desktop.memory import MemoryStore
from navi_desktop.memory.doctor import examine
from navi_desktop.memory.embedders import OllamaEmbedder
from navi_desktop.memory.maintenance import SIZE_CHECK
from tests.fake_ollama import FakeModel, FakeOllama
from tests.pipeline_helpers import found_by_meaning, make_backend

NAME = "mini-embed"  # no task prefixes: a query of a memory's own text is its vector
EMBEDDER = FakeModel(NAME, ("embedding",), "bert", "22M", "F16", 45_000_000, embed_dim=8)
VALUES = ("drinks green tea", "lives in Porto", "rides a red bicycle")
ODD = "plays the cello on Sundays"
USER = "user: "  # searched for before a memory's own text


def answer_at(fake: FakeOllama, dim: int) -> None:
    """The server's model now gives ``dim``-d vectors, under the same name."""
    fake.models[EMBEDDER.full_name] = replace(EMBEDDER, embed_dim=dim)


@asynccontextmanager
async def ollama() -> AsyncIterator[tuple[FakeOllama, OllamaEmbedder]]:
    async with FakeOllama([EMBEDDER]) as fake, make_backend(fake) as llm:
        yield fake, OllamaEmbedder(NAME, llm.embed_fn)


async def sizes(store: Any) -> dict[str, list[int]]:
    """Each memory's vectors, by their sizes."""
    async with store.db.reading():
        rows = await store.db.fetchall(
            "SELECT m.value, e.dim FROM embeddings e JOIN memories m ON m.id = e.memory_id"
        )
    out: dict[str, list[int]] = {}
    for value, dim in rows:
        out.setdefault(value, []).append(dim)
    return out


async def one_odd_vector(store: Any, fake: FakeOllama) -> None:
    """Three memories at 8 dimensions, then one the server answered at 12."""
    for value in VALUES:
        await store.add_memory(value)
    await store.backfill_embeddings()
    answer_at(fake, 12)
    await store.add_memory(ODD)
    await store.backfill_embeddings()
    answer_at(fake, 8)
    assert (await sizes(store))[ODD] == [12]


async def test_a_vector_of_another_size_is_made_again_and_found_by_meaning(tmp_path):
    """It was kept for good (the pass went by the model's name) and search left it out."""
    path = tmp_path / "memory.db"
    async with ollama() as (fake, embedder):
        async with await MemoryStore.open(path, embedder=embedder) as store:
            await one_odd_vector(store, fake)
        async with await MemoryStore.open(path, embedder=embedder) as store:  # a new start
            assert await store.backfill_embeddings() == 1
            assert await sizes(store) == {v: [8] for v in (*VALUES, ODD)}
            assert await found_by_meaning(store, ODD, USER)
            assert await store.missing_embeddings() == 0


async def test_on_a_memory_server_machines_of_two_sizes_leave_each_others_vectors(pg_dsn):
    """Two machines share a profile; their models of one name give two sizes (one upgraded,
    one not yet). Each counted the other's vectors as stale and made them again, replacing
    them: every pass on either machine re-embedded the whole profile, for good."""
    from navi_desktop.memory.pg import PgMemoryStore
    from tests.pg_support import profile_name

    profile = profile_name()
    async with ollama() as (fake_a, embedder_a), ollama() as (fake_b, embedder_b):
        answer_at(fake_b, 12)
        a = await PgMemoryStore.open(pg_dsn, profile, embedder=embedder_a)
        b = await PgMemoryStore.open(pg_dsn, profile, embedder=embedder_b)
        async with a, b:
            for value in VALUES:
                await a.add_memory(value)
            passes = [await s.backfill_embeddings() for s in (a, b, a, b)]
            assert passes == [3, 0, 0, 0]
            # No pass asks a model its size: nothing on a server would read the answer.
            asked = [
                r.body["input"]
                for f in (fake_a, fake_b)
                for r in f.requests
                if r.path == "/api/embed"
            ]
            assert not [texts for texts in asked if SIZE_CHECK in texts], asked
            assert await sizes(a) == {v: [8] for v in VALUES}
            assert await found_by_meaning(a, VALUES[1], USER)  # the first machine's search works
            hits = await b.search("Porto")  # the other's by words
            assert hits[0].memory.value == VALUES[1] and "vector" not in hits[0].signals


async def test_a_whole_profile_moves_to_the_models_new_size(tmp_path):
    """768 → 384 under the same name: search works throughout (by words, and by meaning for
    what has its new vector), every memory gets one, and the doctor says how far it is."""
    path = tmp_path / "memory.db"
    values = [f"{word} is a thing I like" for word in "tea jazz chess hiking rain snow".split()]
    async with ollama() as (fake, embedder):
        answer_at(fake, 768)
        async with await MemoryStore.open(path, embedder=embedder) as store:
            for value in values:
                await store.add_memory(value)
            await store.backfill_embeddings()
            answer_at(fake, 384)
            hits = await store.search("chess")  # nothing of 384 dimensions yet: by words
            assert hits[0].memory.value == values[2] and "vector" not in hits[0].signals
            assert await store.missing_embeddings() == 6
            assert await store.backfill_embeddings(batch=2, limit=2) == 2
            assert await found_by_meaning(store, values[0], USER)
            hits = await store.search("chess")
            assert hits[0].memory.value == values[2] and "vector" not in hits[0].signals
            said = [(f.level, f.text) for f in examine(path).findings if f.check == "vectors"]
            assert said == [
                (
                    "warning",
                    f"ollama/{NAME} has vectors of 2 sizes (2 of 384, 4 of 768 dimensions):"
                    " search by meaning uses the size the model gives now and leaves the others"
                    " out",
                )
            ]
            assert await store.backfill_embeddings() == 4
            assert await sizes(store) == {v: [384] for v in values}
            assert all([await found_by_meaning(store, v, USER) for v in values])
            said = [(f.level, f.text) for f in examine(path).findings if f.check == "vectors"]
            assert said == [("ok", f"6 vectors (ollama/{NAME})")]


async def test_a_text_answered_at_another_size_than_the_rest_of_its_batch_gets_no_vector(
    tmp_path, monkeypatch
):
    """Asked text by text after a batch of mixed sizes, the first text's size was taken as
    the right one: when that text was the odd one, it kept its vector and the others lost
    theirs."""
    real = fo.fake_vector

    def vector(model: str, text: str, dim: int, keep: int | None = None) -> list[float]:
        return [0.5] * (dim + 3) if "odd" in text else real(model, text, dim, keep)

    monkeypatch.setattr(fo, "fake_vector", vector)
    async with ollama() as (_, embedder):
        store = await MemoryStore.open(tmp_path / "memory.db", embedder=embedder)
        async with store:
            for value in ("an odd one first", *VALUES):
                await store.add_memory(value)
            await store.backfill_embeddings()
            assert await sizes(store) == {v: [8] for v in VALUES}
            assert await store.missing_embeddings() == 1


async def test_on_a_memory_server_machines_of_two_models_leave_each_others_vectors(pg_dsn):
    """Two machines share a profile and embed with two models. Each pass dropped the other
    model's vectors as an earlier model's, so every pass on either machine re-embedded the
    whole profile, for good. A model no machine has embedded with for a month goes at the
    daily maintenance."""
    from navi_desktop.memory.pg import PgMemoryStore
    from tests.fakes import BagOfWordsEmbedder
    from tests.pg_support import profile_name

    profile = profile_name()
    first, second = BagOfWordsEmbedder("first-embed"), BagOfWordsEmbedder("second-embed")
    a = await PgMemoryStore.open(pg_dsn, profile, embedder=first)
    b = await PgMemoryStore.open(pg_dsn, profile, embedder=second)
    async with a, b:
        for value in VALUES:
            await a.add_memory(value)
        passes = [await s.backfill_embeddings() for s in (a, b, a, b)]
        assert passes == [3, 3, 0, 0]

        async def models() -> dict[str, int]:
            async with a.db.reading():
                rows = await a.db.fetchall(
                    "SELECT model, count(*) FROM embeddings GROUP BY model ORDER BY model"
                )
            return dict(rows)

        assert await b.drop_unused_models() == 0
        assert await models() == {"first-embed": 3, "second-embed": 3}
        async with a.db.transaction():  # the first machine stopped embedding 40 days ago
            await a.db.execute(
                "UPDATE embeddings SET created_at = ? WHERE model = ?",
                ("2001-01-01T00:00:00.000Z", "first-embed"),
            )
        assert await a.drop_unused_models() == 0  # its own model stays on the machine using it
        assert await b.drop_unused_models() == 3
        assert await models() == {"second-embed": 3}
