"""Importing items that carry no ``created_at``. Before, such an item was keyed by the time of
the import (to the millisecond), so it never matched a memory already here: importing the
same file twice duplicated everything, and identical items in one file collapsed or not
depending on how fast the import ran ("added 44, skipped 156" for 200 identical facts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from navi_desktop.memory import MemoryStore

DATED = "2025-03-01T10:00:00Z"


def export(*memories: dict[str, Any]) -> dict[str, Any]:
    return {"format": "navi-memory", "version": 1, "memories": list(memories)}


def fact(n: int, key: str | None, value: str, **extra: Any) -> dict[str, Any]:
    item = {"id": n, "kind": "fact", "category": "preferences", "value": value, **extra}
    if key is not None:
        item["key"] = key
    return item


async def rows(store: MemoryStore) -> list[Any]:
    return await store.db.fetchall(
        "SELECT id, kind, key, value, evidence, created_at FROM memories ORDER BY id"
    )


NO_DATES = export(fact(1, "tea", "oolong"), fact(2, "coffee", "black"))


async def test_a_file_without_dates_imported_twice_is_skipped_the_second_time(
    tmp_path: Path,
) -> None:
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        first = await store.import_data(NO_DATES)
        assert (first.added, first.skipped) == (2, 0)
        second = await store.import_data(NO_DATES)
        assert (second.added, second.skipped) == (0, 2)
        assert second.ids == first.ids  # each maps to the memory the first import made
        assert len(await rows(store)) == 2


async def test_an_undated_item_matches_the_same_memory_whatever_its_date(tmp_path: Path) -> None:
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        # one imported with a date, one remembered now: both are "already here"
        await store.import_data(export(fact(1, "tea", "oolong", created_at=DATED)))
        added = (await store.add_memory("black", category="preferences", key="coffee")).memory
        before = await rows(store)
        # the value compared as the dedupe key compares it (case, edge punctuation)
        report = await store.import_data(
            export(fact(7, "Tea", "Oolong."), fact(8, "coffee", " black "))
        )
        assert (report.added, report.skipped) == (0, 2)
        assert report.ids[7] == before[0]["id"] and report.ids[8] == added.id
        assert await rows(store) == before


async def test_identical_undated_items_in_one_file_collapse_to_the_first(tmp_path: Path) -> None:
    items = [fact(n, "tea", "oolong", evidence=f"said so #{n}") for n in range(1, 201)]
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        # out of order in the file: "first" is the lowest id, as the import orders them
        report = await store.import_data(export(*reversed(items)))
        assert (report.added, report.skipped) == (1, 199)
        [row] = await rows(store)
        assert row["evidence"] == "said so #1"
        assert set(report.ids.values()) == {row["id"]} and len(report.ids) == 200


async def test_rules_and_episodes_without_key_or_date_are_recognised(tmp_path: Path) -> None:
    data = export(
        {"id": 1, "kind": "rule", "value": "Always answer in French"},
        {"id": 2, "kind": "episode", "value": "We planned a trip to Kyoto."},
        {"id": 3, "kind": "fact", "value": "likes long walks"},  # a fact with no key
        {"id": 4, "kind": "episode", "value": "Always answer in French"},  # another kind
    )
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        await store.add_memory("Always answer in French", kind="rule")
        first = await store.import_data(data)
        assert (first.added, first.skipped) == (3, 1)
        second = await store.import_data(data)
        assert (second.added, second.skipped) == (0, 4)
        assert [r["kind"] for r in await rows(store)] == ["rule", "episode", "fact", "episode"]


async def test_an_undated_item_after_a_dated_twin_in_the_same_file_is_skipped(
    tmp_path: Path,
) -> None:
    data = export(fact(1, "tea", "oolong", created_at=DATED), fact(2, "tea", "oolong"))
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        report = await store.import_data(data)
        assert (report.added, report.skipped) == (1, 1)
        [row] = await rows(store)
        assert row["created_at"] == DATED and report.ids == {1: row["id"], 2: row["id"]}


async def test_dated_items_keep_their_own_identity(tmp_path: Path) -> None:
    """Unchanged: an item with a date is the same memory only at that date."""
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        await store.import_data(export(fact(1, "tea", "oolong")))
        other_day = export(fact(1, "tea", "oolong", created_at=DATED))
        assert (await store.import_data(other_day)).added == 1
        assert (await store.import_data(other_day)).skipped == 1
        assert len(await rows(store)) == 2


def test_the_cli_imports_a_file_without_dates_twice_without_duplicates(cli, home) -> None:
    path = home / "nots.json"
    path.write_text(json.dumps(NO_DATES))
    code, out, err = cli("import", str(path))
    assert code == 0, err
    assert "2 added, 0 skipped" in out
    code, out, err = cli("import", str(path))
    assert code == 0, err
    assert "0 added, 2 skipped" in out
    same = home / "same.json"
    same.write_text(json.dumps(export(*(fact(n, "juice", "orange") for n in range(1, 201)))))
    code, out, err = cli("import", str(same))
    assert code == 0, err
    assert "1 added, 199 skipped" in out
    code, out, _ = cli("list", "--json")
    assert code == 0
    listed = json.loads(out)
    assert listed["total"] == 3
    assert sorted(m["value"] for m in listed["memories"]) == ["black", "oolong", "orange"]
