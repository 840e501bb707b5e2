"""Counts of matching rows kept between searches: answered again while the table has barely
grown, counted again when it has grown more, when a larger cap is asked, or when rows were
deleted (then nothing kept for that table survives)."""

from __future__ import annotations

import math

import pytest

from navi_desktop.memory import MemoryStore, search
from navi_desktop.memory.match_counts import WHOLE, MatchCounts


class Counter:
    """A counter that says how often it was asked."""

    def __init__(self, found: int) -> None:
        self.found, self.asked = found, 0

    def __call__(self, cap: int) -> int:
        self.asked += 1
        return min(self.found, cap)


def test_a_count_is_kept_while_the_table_barely_grows():
    counts, word = MatchCounts(), Counter(40)
    assert counts.count("fts", "tea", 10_000, 3_001, word) == 40
    assert counts.count("fts", "tea", 10_150, 3_001, word) == 40  # within 2% of the rows
    assert counts.count("fts", "tea", 10_150, 50, word) == 40  # an exact count answers any cap
    assert word.asked == 1
    word.found = 45
    assert counts.count("fts", "tea", 10_300, 3_001, word) == 45  # grown by 3%: counted again
    assert word.asked == 2


def test_a_capped_count_is_taken_again_for_a_larger_cap():
    counts, word = MatchCounts(), Counter(50_000)
    assert counts.count("fts", "the", 10**6, 3_001, word) == 3_001  # "at least"
    assert counts.count("fts", "the", 10**6, 2_000, word) == 2_000  # still at least that
    assert word.asked == 1
    assert counts.count("fts", "the", 10**6, 12_004, word) == 12_004
    assert counts.count("fts", "the", 10**6, WHOLE, word) == 50_000
    assert counts.count("fts", "the", 10**6, 12_004, word) == 12_004
    assert word.asked == 3


def test_deleted_rows_drop_every_count_kept_for_that_table_only():
    counts = MatchCounts()
    counts.count("fts", "secret", 500, 3_001, Counter(3))
    counts.count("fts", "tea", 500, 3_001, Counter(7))
    counts.count("links", 12, 900, 3_001, Counter(9))
    again = Counter(6)
    assert counts.count("fts", "tea", 499, 3_001, again) == 6 and again.asked == 1
    assert len(counts) == 2  # "secret" and "tea" dropped, "tea" counted again
    assert ("links", 12) in counts._kept
    counts.drop("links")
    assert len(counts) == 1


def test_the_least_recently_used_counts_go_first_and_no_word_is_kept_readable():
    counts = MatchCounts(size=2)
    for word in ("a", "b"):
        counts.count("fts", word, 100, 10, Counter(1))
    counts.count("fts", "a", 100, 10, Counter(1))  # "a" used again
    counts.count("fts", "c", 100, 10, Counter(1))
    assert [counts._sealed(w) for w in ("a", "c")] == [k[1] for k in counts._kept]
    assert not any(word in repr(counts._kept) for word in ("'a'", "'b'", "'c'"))
    b = Counter(1)
    counts.count("fts", "b", 100, 10, b)
    assert b.asked == 1  # "b" was dropped


async def test_search_counts_common_words_once_until_rows_are_forgotten(tmp_path, monkeypatch):
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        for i in range(8):
            await store.add_memory(f"green tea and a scone, visit {i}", key=f"tea {i}")
        scone = await store.add_memory("a scone with jam", key="jam")
        monkeypatch.setattr(search, "BM25_ROW_BUDGET", 3)  # both words are past it
        asked: list[object] = []
        keep = store._match_counts.count

        def spying(table, item, rows, cap, counter):
            return keep(table, item, rows, cap, lambda c: asked.append(item) or counter(c))

        monkeypatch.setattr(store._match_counts, "count", spying)
        first = [h.id for h in await store.search("tea scone", limit=50)]
        assert asked and set(asked) <= {'"tea"', '"scone"'}
        asked.clear()
        assert [h.id for h in await store.search("tea scone", limit=50)] == first
        await store.add_memory("oolong tea, no scone", key="oolong")  # one row more
        await store.search("tea scone", limit=50)
        assert asked == []
        await store.forget(scone.memory.id)
        await store.search("tea scone", limit=50)
        assert set(asked) == {'"tea"', '"scone"'}  # the table shrank: counted afresh


async def test_a_forget_drops_the_counts_even_when_a_save_hides_the_shrink(tmp_path, monkeypatch):
    """A forget and then a new memory before the next search: the table did not shrink, but
    what was forgotten must not keep a count for the rest of the session."""
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        for i in range(8):
            await store.add_memory(f"green tea and a scone, visit {i}", key=f"tea {i}")
        scone = await store.add_memory("a scone with jam", key="jam")
        monkeypatch.setattr(search, "BM25_ROW_BUDGET", 3)
        await store.search("tea scone", limit=50)
        assert len(store._match_counts)
        await store.forget(scone.memory.id)
        await store.add_memory("oolong tea with a scone", key="oolong")  # as many rows again
        assert len(store._match_counts) == 0
        asked: list[object] = []
        keep = store._match_counts.count

        def spying(table, item, rows, cap, counter):
            return keep(table, item, rows, cap, lambda c: asked.append(item) or counter(c))

        monkeypatch.setattr(store._match_counts, "count", spying)
        await store.search("tea scone", limit=50)
        assert set(asked) == {'"tea"', '"scone"'}  # counted afresh


async def test_a_merge_gives_the_kept_name_its_new_whole_count(tmp_path, monkeypatch):
    """Merging moves links without the table shrinking: the kept name's weight is its count
    after the merge, not the one search kept from before it."""
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        for i in range(9):
            await store.add_memory(f"Maria visited Museum{i}", key=f"maria {i}")
        for i in range(4):
            await store.add_memory(f"Mia played chess, game {i}", key=f"mia {i}")
        for i in range(6):
            await store.add_memory(f"Oskar baked bread, loaf {i}", key=f"oskar {i}")
        monkeypatch.setattr(search, "ENTITY_LINK_BUDGET", 2)  # every name is past it
        total = await store.db.scalar("SELECT count(*) FROM entity_links")

        async def weights(query: str) -> set[float]:
            hits = await store.search(query, limit=50)
            return {round(h.signals["entity"].score, 6) for h in hits if "entity" in h.signals}

        assert await weights("Mia") == {round(math.log(1 + total / 4), 6)}
        await store.merge_entities("Mia", "Oskar")
        total = await store.db.scalar("SELECT count(*) FROM entity_links")
        assert await weights("Mia") == {round(math.log(1 + total / 10), 6)}


@pytest.mark.parametrize("budget", [3, 1000])
async def test_kept_counts_do_not_change_what_search_finds(tmp_path, monkeypatch, budget):
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        for i in range(12):
            await store.add_memory(f"Lena hikes in the Alps, trip {i}", key=f"hike {i}")
            await store.add_memory(f"Lena reads a novel, book {i}", key=f"book {i}")
        monkeypatch.setattr(search, "BM25_ROW_BUDGET", budget)
        monkeypatch.setattr(search, "ENTITY_LINK_BUDGET", budget)
        queries = ["Lena hikes", "novel Alps", "Lena book trip"]
        kept = [await store.search(q, limit=50) for q in queries]
        fresh = []
        for q in queries:
            store._match_counts = MatchCounts()  # nothing kept
            fresh.append(await store.search(q, limit=50))
        assert [[(h.id, h.score) for h in r] for r in kept] == [
            [(h.id, h.score) for h in r] for r in fresh
        ]
