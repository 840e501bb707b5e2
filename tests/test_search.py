"""Hybrid search: any text is a valid query, filters, signals, vectors and their absence."""

from __future__ import annotations

import pytest

from navi_desktop.errors import InvalidInput
from navi_desktop.memory import MemoryStore
from tests.fakes import BagOfWordsEmbedder

ODD_QUERIES = [
    '"',
    '""',
    "'",
    "-",
    "--x",
    "*",
    "a*",
    "AND",
    "OR NOT",
    "NEAR(",
    "NEAR(a b",
    "(((",
    ")",
    "x:y",
    "col:value",
    "^start",
    "+1",
    "{a b}",
    "a AND (b OR",
    "🙂🙃",
    "",
    "   ",
    "\x00",
    "\\",
    "%_",
    "東京",
    "Привет",
    "日本語のテキスト",
    "NOT",
    "a" * 5000,
    "'; DROP TABLE memories; --",
]


@pytest.fixture
async def store(tmp_path):
    async with await MemoryStore.open(tmp_path / "memory.db") as s:
        await s.add_memory(
            "My sister Ana lives in Porto", category="relationships", key="sister city"
        )
        await s.add_memory("prefers tea over coffee", category="preferences", key="drink")
        await s.add_memory("Меня зовут Дмитрий", category="profile", key="name ru")
        await s.add_memory("東京タワーの近くに住んでいる", category="profile", key="home jp")
        await s.add_memory("loves crème brûlée", category="preferences", key="dessert")
        await s.add_memory("Never use emojis in replies", kind="rule")
        yield s


@pytest.mark.parametrize("query", ODD_QUERIES)
async def test_any_text_is_a_valid_query(store, query):
    hits = await store.search(query)
    assert isinstance(hits, list)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Дмитрий", "Меня зовут Дмитрий"),
        ("東京", "東京タワーの近くに住んでいる"),
        ("タワー", "東京タワーの近くに住んでいる"),
        ("creme brulee", "loves crème brûlée"),
        ("Crème", "loves crème brûlée"),
        ('"tea" AND -coffee*', "prefers tea over coffee"),
    ],
)
async def test_non_english_and_operator_text_is_found(store, query, expected):
    hits = await store.search(query)
    assert hits and hits[0].memory.value == expected


async def test_hits_explain_themselves(store):
    hits = await store.search("Where does Ana live?")
    top = hits[0]
    assert top.memory.value == "My sister Ana lives in Porto"
    assert top.signals["bm25"].rank == 1
    assert top.signals["entity"].rank == 1  # "Ana" is a linked entity
    assert "vector" not in top.signals  # no embedder configured
    assert top.to_dict()["signals"]["bm25"]["rank"] == 1


async def test_filters(store):
    assert {h.kind for h in await store.search("emojis replies", kinds=["rule"])} == {"rule"}
    assert not await store.search("emojis", kinds=["fact"])
    hits = await store.search("tea coffee Porto", categories=["preferences"])
    assert [h.memory.category for h in hits] == ["preferences"]
    with pytest.raises(InvalidInput, match="category"):
        await store.search("x", categories=["bogus"])
    with pytest.raises(InvalidInput, match="kind"):
        await store.search("x", kinds=["bogus"])
    with pytest.raises(InvalidInput, match="since"):
        await store.search("x", since="last tuesday")


async def test_session_and_date_filters(tmp_path):
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        old = await store.create_session(at="2023-05-01T10:00:00Z")
        new = await store.create_session(at="2024-06-01T10:00:00Z")
        await store.save_message(
            old.id, "user", "planning a trip to Kyoto", at="2023-05-01T10:00:00Z"
        )
        await store.save_message(
            new.id, "user", "booked the Kyoto hotel", at="2024-06-01T10:00:00Z"
        )
        await store.add_memory("trip to Kyoto", key="trip", session_id=new.id)
        texts = lambda hits: [h.text for h in hits]  # noqa: E731
        assert len(await store.search("Kyoto", kinds=["message"])) == 2
        only_old = await store.search("Kyoto", kinds=["message"], exclude_session=new.id)
        assert ["planning" in t for t in texts(only_old)] == [True]
        recent = await store.search("Kyoto", kinds=["message"], since="2024-01-01")
        assert ["booked" in t for t in texts(recent)] == [True]
        early = await store.search("Kyoto", kinds=["message"], until="2023-12-31")
        assert ["planning" in t for t in texts(early)] == [True]
        assert not await store.search("Kyoto", exclude_session=new.id)
        # message documents carry the date in words, so dates are searchable
        assert "1 May 2023" in texts(await store.search("May 2023", kinds=["message"]))[0]


async def test_vector_signal_and_backfill(tmp_path):
    embedder = BagOfWordsEmbedder()
    async with await MemoryStore.open(tmp_path / "memory.db", embedder=embedder) as store:
        a = (await store.add_memory("owns a golden retriever", key="pet")).memory
        await store.add_memory("works as a nurse", key="job")
        assert await store.missing_embeddings() == 2
        assert await store.backfill_embeddings() == 2
        assert await store.missing_embeddings() == 0
        row = await store.db.fetchone("SELECT model, dim FROM embeddings LIMIT 1")
        assert tuple(row) == ("test/bow-64", 64)
        hits = await store.search("golden retriever")
        assert hits[0].id == a.id and hits[0].signals["vector"].rank == 1
        # editing drops the stale vector; backfill makes a new one
        await store.edit(a.id, value="owns a black cat")
        assert await store.missing_embeddings() == 1
        await store.backfill_embeddings()
        assert (await store.search("black cat"))[0].signals["vector"].rank == 1


async def test_text_search_survives_a_dead_embedder(tmp_path):
    embedder = BagOfWordsEmbedder()
    async with await MemoryStore.open(tmp_path / "memory.db", embedder=embedder) as store:
        await store.add_memory("allergic to penicillin", key="allergy")
        await store.backfill_embeddings()
        embedder.fail = True
        hits = await store.search("penicillin")
        assert hits and set(hits[0].signals) == {"bm25"}


async def test_new_embedding_model_reembeds_while_text_search_works(tmp_path):
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path, embedder=BagOfWordsEmbedder("old/m", 32)) as store:
        await store.add_memory("speaks Portuguese", key="language")
        await store.add_memory("runs marathons", key="sport")
        await store.backfill_embeddings()
    async with await MemoryStore.open(path, embedder=BagOfWordsEmbedder("new/m", 48)) as store:
        assert await store.missing_embeddings() == 2
        hits = await store.search("marathons")
        assert hits and "vector" not in hits[0].signals  # old vectors are never mixed in
        await store.backfill_embeddings(limit=1)
        assert await store.missing_embeddings() == 1
        models = {r[0] for r in await store.db.fetchall("SELECT DISTINCT model FROM embeddings")}
        assert models == {"old/m", "new/m"}  # the old ones stay until the new set is complete
        await store.backfill_embeddings()
        rows = await store.db.fetchall("SELECT model, dim FROM embeddings")
        assert {tuple(r) for r in rows} == {("new/m", 48)}
        assert (await store.search("marathons"))[0].signals["vector"].rank == 1


async def test_search_never_writes(store):
    before = store.db.conn.total_changes
    await store.search("tea Porto")
    await store.search("emojis", kinds=["rule", "message"])
    assert store.db.conn.total_changes == before


async def test_limit_is_checked(store):
    with pytest.raises(InvalidInput, match="limit"):
        await store.search("tea", limit=0)
    assert len(await store.search("tea Porto Ana coffee emojis", limit=2)) == 2


async def test_a_search_text_past_the_limit_is_refused_in_words(store):
    """Every way in (the CLI on the file, the daemon, a server store) meets the same check."""
    await store.search("t" * 10_000)
    with pytest.raises(InvalidInput, match=r"a search is at most 10,000 characters.*10,001"):
        await store.search("t" * 10_001)
    with pytest.raises(InvalidInput, match="at most 200 characters, and this one has 201"):
        await store.list_entities(query="t" * 201)


async def test_backfill_never_stores_a_vector_for_text_edited_meanwhile(tmp_path):
    embedder = BagOfWordsEmbedder()
    async with await MemoryStore.open(tmp_path / "memory.db", embedder=embedder) as store:
        m = (await store.add_memory("drives a red bicycle", key="vehicle")).memory
        plain_embed = embedder.embed

        async def embed_while_user_edits(texts, *, query):
            vectors = await plain_embed(texts, query=query)
            if embedder.calls == 1:
                await store.edit(m.id, value="drives a blue scooter")
            return vectors

        embedder.embed = embed_while_user_edits
        await store.backfill_embeddings()
        row = await store.db.fetchone(
            "SELECT content_hash FROM embeddings WHERE memory_id = ?", (m.id,)
        )
        assert embedder.calls == 2  # the edited text was embedded again
        assert (await store.search("blue scooter"))[0].signals["vector"].rank == 1
        assert row is not None


@pytest.mark.parametrize(
    ("budget", "signal", "common", "rare", "query"),
    [
        # "common" matches every memory: past the row budget BM25 scores "zither" only.
        (
            "BM25_ROW_BUDGET",
            "bm25",
            "likes a common hobby number {i}",
            "a common zither",
            "common zither",
        ),
        # "Maria" is linked to every memory: past the link budget only "Lisbon" counts.
        (
            "ENTITY_LINK_BUDGET",
            "entity",
            "Maria visited Museum{i}",
            "Maria moved to Lisbon",
            "Maria Lisbon",
        ),
    ],
)
async def test_common_words_give_way_to_rare_ones_on_a_large_profile(
    tmp_path, monkeypatch, budget, signal, common, rare, query
):
    """A word or name in every memory costs a signal the most and says the least."""
    from navi_desktop.memory import search

    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        for i in range(8):
            await store.add_memory(common.format(i=i), key=f"common {i}")
        target = (await store.add_memory(rare, key="rare")).memory
        monkeypatch.setattr(search, budget, 4)
        hits = await store.search(query)
        assert hits[0].id == target.id
        assert [h.id for h in hits if signal in h.signals] == [target.id]
        monkeypatch.setattr(search, budget, 1000)  # a small profile: every word counts
        ranked = [h for h in await store.search(query) if signal in h.signals]
        assert len(ranked) == 9 and ranked[0].id == target.id


async def test_search_reads_on_connections_that_close_with_the_store(tmp_path):
    store = await MemoryStore.open(tmp_path / "memory.db", embedder=BagOfWordsEmbedder())
    await store.add_memory("plays the cello on Sundays", key="music")
    await store.backfill_embeddings()
    hits = await store.search("cello")
    assert set(hits[0].signals) == {"bm25", "vector"}
    await store.close()
    # SQLite removes the WAL when its last connection closes: none of the readers is left.
    assert not (tmp_path / "memory.db-wal").exists()


async def test_one_vector_of_another_size_leaves_the_others_in_search(tmp_path):
    """The index took its size from any one stored vector: one a model gave at another size
    (a flip, a replaced model under the same name) left every other out of search by
    meaning. It now takes the size most of the newest vectors have."""
    embedder = BagOfWordsEmbedder()
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path, embedder=embedder) as store:
        embedder.dim = 13  # one answer of another size, stored first
        await store.add_memory("odd one out")
        await store.backfill_embeddings()
        embedder.dim = 64
        for text in ("drinks green tea", "lives in Porto", "plays the cello"):
            await store.add_memory(text)
        await store.backfill_embeddings()
    async with await MemoryStore.open(path, embedder=embedder) as store:  # the index loads
        [hit] = await store.search("cello player")
        assert "vector" in hit.signals
