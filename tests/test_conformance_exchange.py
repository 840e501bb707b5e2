"""Conformance, export and import: the same file on both backends (``any_store``), so a
profile exported from SQLite imports into PostgreSQL and back without losing anything."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from navi_desktop.errors import InvalidInput
from navi_desktop.memory import MemoryStore, exchange
from navi_desktop.memory.clock import iso
from navi_desktop.memory.exchange import parse_export
from tests.fakes import BagOfWordsEmbedder
from tests.pg_support import profile_name

RENUMBERED = ("id", "superseded_by", "history")


def later(days: float) -> str:
    return iso(datetime.now(UTC) + timedelta(days=days))


async def fresh(request, tmp_path, backend: str, name: str):
    """An empty profile on ``backend``."""
    if backend == "sqlite":
        return await MemoryStore.open(tmp_path / f"{name}.db", embedder=BagOfWordsEmbedder())
    from navi_desktop.memory.pg import PgMemoryStore

    dsn = request.getfixturevalue("pg_dsn")
    return await PgMemoryStore.open(dsn, profile_name(), embedder=BagOfWordsEmbedder())


def backend_of(store) -> str:
    return "sqlite" if isinstance(store, MemoryStore) else "postgres"


def comparable(data):
    """Memories by value, their successor's value for the supersession link, and the history
    less the record an import adds about itself, with the ids it names made values."""
    by_id = {m["id"]: m for m in data["memories"]}

    def named(record):
        return {
            k: by_id[v]["value"] if k in ("supersedes", "superseded_by") and v in by_id else v
            for k, v in (record or {}).items()
        }

    out = []
    for m in data["memories"]:
        successor = by_id.get(m["superseded_by"])
        history = [
            (h["action"], h["actor"], h["at"], repr(h["old"]), repr(named(h["new"])))
            for h in m["history"]
            if h["action"] != "import"
        ]
        fields = sorted((k, v) for k, v in m.items() if k not in RENUMBERED)
        out.append((fields, successor["value"] if successor else None, history))
    return sorted(out, key=repr)


async def populate(store) -> None:
    session = await store.create_session("trip planning", at="2025-01-02T03:04:05Z")
    await store.add_memory("Berlin", category="profile", key="home city", evidence="in Berlin")
    await store.add_memory(
        "Lisbon",
        category="profile",
        key="home city",
        session_id=session.id,
        evidence="we moved to Lisbon",
        source="conversation",
    )
    pinned = await store.add_memory("allergic to peanuts", category="health", key="allergy")
    await store.pin(pinned.memory.id)
    await store.add_memory("Always answer in French", kind="rule")
    await store.add_memory(
        "We planned a trip to Kyoto.", kind="episode", session_id=session.id, source="conversation"
    )
    await store.add_memory(
        "owes Sam 20 euros", category="other", key="debt", status="held", review_reason="unsure"
    )
    edited = (await store.add_memory("climbing", category="other", key="hobby")).memory
    await store.edit(edited.id, value="bouldering", evidence="I boulder on Sundays")
    await store.add_memory("in Rome", key="location", expires_at=later(365))
    await store.add_memory("Mochi", key="cat name", subject="user")  # strengthened twice
    await store.add_memory("mochi", key="cat name", subject="user")


async def test_export_import_round_trips_on_each_backend(any_store, request, tmp_path):
    await populate(any_store)
    exported = json.loads(json.dumps(await any_store.export_data()))
    assert len(exported["memories"]) == 9 and exported["sessions"][0]["title"] == "trip planning"
    async with await fresh(request, tmp_path, backend_of(any_store), "copy") as copy:
        report = await copy.import_data(parse_export(json.dumps(exported)))
        assert (report.added, report.skipped, report.blocked) == (9, 0, 0)
        again = await copy.export_data()
        assert comparable(again) == comparable(exported)
        assert [h.memory.value for h in await copy.search("home city")] == ["Lisbon"]
        (session,) = again["sessions"]
        assert (await copy.get_session(session["id"])).title == "trip planning"
        twice = await copy.import_data(exported)  # idempotent
        assert (twice.added, twice.skipped) == (0, 9)
        assert (await copy.list_memories(status=None))[1] == 9


async def test_history_links_are_renumbered_however_many_memories_an_import_adds(
    any_store, request, tmp_path, monkeypatch
):
    """Imports renumber the ids history rows name a chunk of new memories at a time (a
    server takes 32,767 parameters a statement): one at a time here, so the versions of one
    memory land in different chunks."""
    monkeypatch.setattr(exchange, "REMAP_CHUNK", 1)
    await populate(any_store)
    exported = await any_store.export_data()
    async with await fresh(request, tmp_path, backend_of(any_store), "copy") as copy:
        await copy.add_memory("already here", key="plant")  # the copy's ids are not the file's
        assert (await copy.import_data(json.loads(json.dumps(exported)))).added == 9
        again = await copy.export_data()
        again["memories"] = [m for m in again["memories"] if m["value"] != "already here"]
        assert comparable(again) == comparable(exported)


async def test_a_file_from_one_backend_imports_into_the_other_and_back(
    any_store, request, tmp_path
):
    here = backend_of(any_store)
    there = "postgres" if here == "sqlite" else "sqlite"
    await populate(any_store)
    original = await any_store.export_data()
    async with await fresh(request, tmp_path, there, "other") as other:
        assert (await other.import_data(json.loads(json.dumps(original)))).added == 9
        crossed = await other.export_data()
        assert comparable(crossed) == comparable(original)
        # the same Markdown, but for the ids and the time of export
        assert _plain(await other.export_markdown()) == _plain(await any_store.export_markdown())
        pinned = [m for m in crossed["memories"] if m["pinned"]]
        assert [m["value"] for m in pinned] == ["allergic to peanuts"]
    async with await fresh(request, tmp_path, here, "back") as back:
        assert (await back.import_data(json.loads(json.dumps(crossed)))).added == 9
        assert comparable(await back.export_data()) == comparable(original)
        old, new = sorted(
            [m for m in (await back.export_data())["memories"] if m["key"] == "home city"],
            key=lambda m: m["value"],
        )
        assert new["value"] == "Lisbon" and old["superseded_by"] == new["id"]
        assert [v.value for v in await back.versions(new["id"])] == ["Berlin"]


def _plain(markdown: str) -> str:
    return re.sub(r"#\d+", "#N", re.sub(r"Exported .*\.", "Exported.", markdown))


async def test_forgotten_memories_stay_out_of_an_import(any_store):
    await populate(any_store)
    data = await any_store.export_data()
    rule = (await any_store.list_memories(kind="rule"))[0][0]
    await any_store.forget(rule.id)
    report = await any_store.import_data(data)
    assert (report.blocked, report.added) == (1, 0)
    assert (await any_store.list_memories(kind="rule"))[1] == 0


BAD = [
    ([], 'input: not a Navi memory export (expected "format": "navi-memory")'),
    (
        {"format": "navi-memory", "version": 9, "memories": []},
        "input: unsupported export version 9",
    ),
    ({"format": "navi-memory", "version": 1}, 'input: "memories" must be a list'),
    (
        {"format": "navi-memory", "version": 1, "memories": [{"id": 1, "kind": "fact"}]},
        'input: memory #1: "value" must be a string',
    ),
    (
        {
            "format": "navi-memory",
            "version": 1,
            "memories": [
                {"id": 1, "kind": "fact", "value": "good one"},
                {"id": 2, "kind": "fact", "value": "x", "category": "astrology"},
            ],
        },
        "input: memory #2: unknown category 'astrology'",
    ),
    (
        {
            "format": "navi-memory",
            "version": 1,
            "sessions": [{"id": "s1", "created_at": "yesterday"}],
            "memories": [],
        },
        "input: session #1: created_at",
    ),
    (
        {
            "format": "navi-memory",
            "version": 1,
            "memories": [
                {"id": 1, "kind": "fact", "value": "good one"},
                {"id": 2, "kind": "fact", "value": "x", "history": [{"at": 5}]},
            ],
        },
        'input: memory #2: history entry #1: "at" must be a string',
    ),
]


@pytest.mark.parametrize(
    ("data", "line"),
    BAD,
    ids=["list", "version", "no-memories", "no-value", "category", "session-time", "history-at"],
)
async def test_a_bad_file_is_refused_with_the_same_line_and_imports_nothing(any_store, data, line):
    with pytest.raises(InvalidInput) as refused:
        await any_store.import_data(data)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(line)
    assert (await any_store.list_memories(status=None))[1] == 0
    assert await any_store.list_sessions() == []
