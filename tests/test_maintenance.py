"""Listing, stats, decay and pruning."""

from __future__ import annotations

import pytest

from navi_desktop.errors import InvalidInput
from navi_desktop.memory import MemoryStore


async def test_list_filters_sort_and_pages(tmp_path):
    async with await MemoryStore.open(tmp_path / "m.db") as store:
        for i in range(7):
            await store.add_memory(
                f"fact number {i}", category="other", key=f"k{i}", confidence=(i + 1) / 10
            )
        await store.add_memory("be brief", kind="rule")
        page, total = await store.list_memories(kind="fact", sort="confidence", limit=3)
        assert total == 7 and [m.value for m in page] == [f"fact number {i}" for i in (6, 5, 4)]
        page2, _ = await store.list_memories(kind="fact", sort="confidence", limit=3, offset=3)
        assert [m.value for m in page2] == [f"fact number {i}" for i in (3, 2, 1)]
        asc, _ = await store.list_memories(kind="fact", sort="id", descending=False, limit=1)
        assert asc[0].value == "fact number 0"
        assert (await store.list_memories(kind="rule"))[1] == 1
        with pytest.raises(InvalidInput, match="sort"):
            await store.list_memories(sort="random")
        with pytest.raises(InvalidInput, match="status"):
            await store.list_memories(status="deleted")


async def test_stats(tmp_path):
    async with await MemoryStore.open(tmp_path / "m.db") as store:
        s = await store.create_session()
        await store.save_message(s.id, "user", "hi")
        await store.add_memory("tea", category="preferences", key="drink")
        await store.add_memory("coffee", category="preferences", key="drink")
        stats = await store.stats()
        wal = store.path.with_name("m.db-wal")
        assert wal.stat().st_size > 0  # the writes are still in the WAL: it counts too
        on_disk = store.path.stat().st_size + wal.stat().st_size
    assert stats["memories"] == {"fact": {"active": 1, "superseded": 1}}
    assert stats["facts_by_category"] == {"preferences": 1}
    assert stats["sessions"] == 1 and stats["messages"] == 1
    assert stats["file_bytes"] == on_disk


async def test_decay_archives_stale_facts_but_not_pinned_or_reinforced(tmp_path):
    async with await MemoryStore.open(tmp_path / "m.db") as store:
        stale = (await store.add_memory("liked a 2019 band", key="band")).memory
        pinned = (await store.add_memory("blood type O+", key="blood type")).memory
        await store.pin(pinned.id)
        repeated = (await store.add_memory("likes chess", key="game")).memory
        for _ in range(5):
            await store.add_memory("likes chess", key="game")
        rule = (await store.add_memory("no emojis", kind="rule")).memory
        await store.db.execute("UPDATE memories SET updated_at = '2024-01-01T00:00:00.000Z'")

        report = await store.decay(now="2024-06-01T00:00:00Z")  # ~150 days later
        assert report.archived == [stale.id]
        assert (await store.get(stale.id)).status == "archived"
        assert (await store.get(pinned.id)).status == "active"
        assert (await store.get(pinned.id)).strength == 1.0
        kept = await store.get(repeated.id)
        assert kept.status == "active" and 0.5 < kept.strength < 1.0
        assert (await store.get(rule.id)).status == "active"
        assert [h.actor for h in await store.history(stale.id)][-1] == "decay"
        assert not await store.search("band")

        await store.touch([repeated.id])  # used in a prompt: strong again
        assert (await store.get(repeated.id)).strength == 1.0
