"""Export and import: JSON that round-trips, Markdown, idempotent and atomic import."""

from __future__ import annotations

import json

import pytest

from navi_desktop.errors import InvalidInput
from navi_desktop.memory import MemoryStore
from navi_desktop.memory.exchange import parse_export

# Ids differ between profiles: import gives new ones (links are compared by value below).
RENUMBERED = ("id", "superseded_by", "history")


def history_of(memory):
    """The history, less the record an import adds about itself."""
    return tuple(
        (h["action"], h["actor"], h["at"], repr(h["new"]))
        for h in memory["history"]
        if h["action"] != "import"
    )


def comparable(data):
    by_id = {m["id"]: m for m in data["memories"]}
    out = []
    for m in data["memories"]:
        successor = by_id.get(m["superseded_by"])
        fields = sorted((k, v) for k, v in m.items() if k not in RENUMBERED)
        out.append((fields, successor["value"] if successor else None, history_of(m)))
    return sorted(out, key=repr)


async def populate(store):
    session = await store.create_session("trip planning")
    await store.add_memory("Berlin", category="profile", key="home city")
    await store.add_memory(
        "Lisbon",
        category="profile",
        key="home city",
        session_id=session.id,
        evidence="we moved to Lisbon",
        source="conversation",
    )
    pinned = (
        await store.add_memory("allergic to peanuts", category="health", key="allergy")
    ).memory
    await store.pin(pinned.id)
    await store.add_memory("Always answer in French", kind="rule")
    await store.add_memory(
        "We planned a trip to Kyoto.", kind="episode", session_id=session.id, source="conversation"
    )
    held = (
        await store.add_memory("owes Sam 20 euros", category="other", key="debt", status="held")
    ).memory
    await store.archive(held.id)


async def test_json_round_trips(tmp_path):
    async with await MemoryStore.open(tmp_path / "a.db") as a:
        await populate(a)
        exported = await a.export_data()
    text = json.dumps(exported)
    async with await MemoryStore.open(tmp_path / "b.db") as b:
        report = await b.import_data(parse_export(text))
        assert report.added == 6 and report.skipped == 0
        again = await b.export_data()
        assert comparable(again) == comparable(exported)
        # the superseded link survived: search shows only the current city
        assert [h.memory.value for h in await b.search("home city")] == ["Lisbon"]
        assert (await b.get_session(again["sessions"][0]["id"])).title == "trip planning"


async def test_import_is_idempotent(tmp_path):
    async with await MemoryStore.open(tmp_path / "a.db") as a:
        await populate(a)
        data = await a.export_data()
        report = await a.import_data(data)  # into the same profile
        assert report.added == 0 and report.skipped == 6
        assert (await a.list_memories(status=None))[1] == 6


async def test_import_skips_forgotten_memories(tmp_path):
    async with await MemoryStore.open(tmp_path / "a.db") as a:
        await populate(a)
        data = await a.export_data()
        rule = (await a.list_memories(kind="rule"))[0][0]
        await a.forget(rule.id)
        report = await a.import_data(data)
        assert report.blocked == 1 and report.added == 0
        assert (await a.list_memories(kind="rule"))[1] == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"format": "navi-memory",\n "version": 1,\n "memories": [\n  {"id": 1,}\n ]}',
            "invalid JSON at line 4, column 12",
        ),
        ("[]", "not a Navi memory export"),
        ('{"format": "navi-memory", "version": 9, "memories": []}', "unsupported export version"),
        (
            '{"format": "navi-memory", "version": 1, "memories": [{"id": 1, "kind": "fact"}]}',
            'memory #1: "value"',
        ),
        (
            '{"format": "navi-memory", "version": 1, "memories": [{"id": 1, "kind": "fact",'
            ' "value": "x", "category": "astrology"}]}',
            "unknown category",
        ),
        (
            '{"format": "navi-memory", "version": 1, "memories": [{"id": 1, "kind": "fact",'
            ' "value": "x", "created_at": "yesterday"}]}',
            "created_at",
        ),
    ],
)
def test_bad_files_name_the_problem(text, message):
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(")):
        parse_export(text, "backup.json")


async def test_invalid_item_imports_nothing(tmp_path):
    async with await MemoryStore.open(tmp_path / "a.db") as a:
        data = {
            "format": "navi-memory",
            "version": 1,
            "memories": [
                {"id": 1, "kind": "fact", "value": "good one"},
                {"id": 2, "kind": "fact", "value": "bad one", "confidence": 3},
            ],
        }
        with pytest.raises(InvalidInput, match="confidence"):
            await a.import_data(data)
        assert (await a.list_memories(status=None))[1] == 0


async def test_markdown_export(tmp_path):
    async with await MemoryStore.open(tmp_path / "a.db") as a:
        await populate(a)
        md = await a.export_markdown()
    assert md.startswith("# Navi memory")
    assert "## Facts" in md and "### Health" in md and "## Rules" in md
    assert "allergic to peanuts (pinned)" in md
    assert "> we moved to Lisbon" in md
    assert "Berlin" not in md  # superseded: not current
    assert "owes Sam" not in md  # archived
