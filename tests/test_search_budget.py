"""Search on a large profile: the words and names that match too much are bounded, and what
is kept is the rarest (budgets made tiny so that a few memories stand for a million)."""

from __future__ import annotations

import math

import pytest

from navi_desktop.memory import MemoryStore, match_counts, search


async def test_the_rarest_of_several_common_words_is_the_one_scored(tmp_path, monkeypatch):
    """Every word matches more memories than the budget: the rarest one is scored, and only
    its newest matches. (Counted only up to the budget, all the words tied, and the tie went
    to the first in alphabetical order: here the commonest.)"""
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        for i in range(12):
            await store.add_memory(f"baked an apple pie, batch {i}", key=f"apple {i}")
        mangoes = [
            (await store.add_memory(f"mango smoothie for breakfast, day {i}", key=f"m {i}")).memory
            for i in range(6)
        ]
        monkeypatch.setattr(search, "BM25_ROW_BUDGET", 4)
        hits = await store.search("apple mango", limit=50)
        scored = [h.id for h in hits if "bm25" in h.signals]
        # the four newest mango memories, none of the apple ones
        assert sorted(scored) == sorted(m.id for m in mangoes[-4:])
        monkeypatch.setattr(search, "BM25_ROW_BUDGET", 1000)  # a small profile: every word
        scored = [h.id for h in await store.search("apple mango", limit=50) if "bm25" in h.signals]
        assert len(scored) == 18


async def test_a_word_in_too_many_memories_alone_scores_only_the_newest(tmp_path, monkeypatch):
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        ids = [
            (await store.add_memory(f"went cycling, ride {i}", key=f"ride {i}")).memory.id
            for i in range(10)
        ]
        monkeypatch.setattr(search, "BM25_ROW_BUDGET", 3)
        scored = [h.id for h in await store.search("cycling") if "bm25" in h.signals]
        assert sorted(scored) == ids[-3:]


async def test_a_name_alone_ranks_its_newest_current_memories_first(tmp_path, monkeypatch):
    """One entity scores all its memories alike: newest first, only current ones, past the
    link budget as within it."""
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        ids = [
            (await store.add_memory(f"Maria visited Museum{i}", key=f"visit {i}")).memory.id
            for i in range(8)
        ]
        await store.add_memory("Oskar likes chess", key="oskar")
        # a new version supersedes one visit: the old one keeps its links but is not current
        newer = (await store.add_memory("Maria visited the Louvre", key="visit 5")).memory.id
        expected = [newer, *(i for i in reversed(ids) if i != ids[5])]
        for budget in (1000, 4):
            monkeypatch.setattr(search, "ENTITY_LINK_BUDGET", budget)
            hits = await store.search("Maria")
            ranked = sorted(
                (h for h in hits if "entity" in h.signals), key=lambda h: h.signals["entity"].rank
            )
            assert [h.id for h in ranked] == expected
            assert len({h.signals["entity"].score for h in ranked}) == 1


async def test_names_past_the_link_budget_keep_the_rarest_with_its_whole_count(
    tmp_path, monkeypatch
):
    """Links are counted only up to a cap (a common name's full count cost milliseconds of
    every query at 1M memories). The rarest name is still the one kept, and its score is
    the IDF of its whole count, not of the cap."""
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        for i in range(9):
            await store.add_memory(f"Maria visited Museum{i}", key=f"maria {i}")
        oskar = [
            (await store.add_memory(f"Oskar played chess, game {i}", key=f"oskar {i}")).memory.id
            for i in range(6)
        ]
        total = await store.db.scalar("SELECT count(*) FROM entity_links")
        oskar_links = await store.db.scalar(
            "SELECT count(*) FROM entity_links l JOIN entities e ON e.id = l.entity_id"
            " WHERE e.norm = 'oskar'"
        )
        assert oskar_links == 6 and total > 15
        monkeypatch.setattr(search, "ENTITY_LINK_BUDGET", 2)  # both names are past it
        for raises in (2, 0):  # the cap raised until Oskar stands out, or left tied
            monkeypatch.setattr(match_counts, "COUNT_RAISES", raises)
            found = await store.search("Maria Oskar", limit=50)
            hits = [h for h in found if "entity" in h.signals]
            scores = [h.signals["entity"].score for h in hits]
            if raises:
                assert sorted(h.id for h in hits) == sorted(oskar)
                assert scores == pytest.approx([math.log(1 + total / 6)] * 6)
            else:  # a tie at the cap goes to the first named; its count is still whole
                assert scores == pytest.approx([math.log(1 + total / 9)] * 9)
