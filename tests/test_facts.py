"""Writing memories: upsert, strengthen, supersede, correct, edit, pin, archive, review."""

from __future__ import annotations

import pytest

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.memory import MemoryStore
from tests.fakes import BagOfWordsEmbedder


@pytest.fixture
async def store(tmp_path):
    async with await MemoryStore.open(tmp_path / "memory.db") as s:
        yield s


async def test_exact_duplicate_strengthens_instead_of_adding(store):
    first = await store.add_memory("Blue", category="preferences", key="Favourite colour")
    again = await store.add_memory(
        "  blue. ", category="preferences", key="favourite-colour", confidence=0.4
    )
    assert first.action == "added" and again.action == "strengthened"
    assert again.memory.id == first.memory.id
    assert again.memory.mentions == 2
    assert again.memory.confidence == 1.0  # a weaker repeat never lowers confidence
    assert (await store.list_memories())[1] == 1
    assert [h.action for h in await store.history(first.memory.id)] == ["create", "strengthen"]


async def test_unkeyed_duplicates_match_on_text(store):
    a = await store.add_memory("Answer in French", kind="rule")
    b = await store.add_memory("answer in french", kind="rule")
    assert b.action == "strengthened" and b.memory.id == a.memory.id


async def test_same_key_new_value_supersedes(store):
    old = (await store.add_memory("Berlin", category="profile", key="home city")).memory
    result = await store.add_memory("Lisbon", category="profile", key="home city")
    assert result.action == "superseded" and result.replaced == old.id
    before = await store.get(old.id)
    assert before.status == "superseded"
    assert before.superseded_by == result.memory.id
    assert before.valid_to is not None
    assert [h.memory.value for h in await store.search("city")] == ["Lisbon"]
    everything = await store.search("city", include_inactive=True)
    assert {h.memory.value for h in everything} == {"Lisbon", "Berlin"}


async def test_correct_keeps_the_old_version_in_history(store):
    m = (await store.add_memory("vim", category="technical", key="editor")).memory
    new = await store.correct(m.id, "helix", evidence="I switched to helix")
    assert new.value == "helix" and new.key == "editor" and new.category == "technical"
    old = await store.get(m.id)
    assert old.status == "superseded" and old.superseded_by == new.id
    assert [h.action for h in await store.history(m.id)] == ["create", "superseded"]
    assert (await store.history(new.id))[-1].new == {"supersedes": m.id}
    with pytest.raises(InvalidInput, match="superseded"):
        await store.correct(m.id, "emacs")


async def test_edit_changes_in_place_and_records_old_values(store):
    m = (await store.add_memory("pyton", category="technical", key="language")).memory
    edited = await store.edit(m.id, value="python", category="projects")
    assert edited.id == m.id and edited.value == "python" and edited.category == "projects"
    entry = (await store.history(m.id))[-1]
    assert entry.action == "edit"
    assert entry.old == {"value": "pyton", "category": "technical"}
    assert entry.new == {"value": "python", "category": "projects"}
    assert [h.id for h in await store.search("python")] == [m.id]
    assert not await store.search("pyton")
    with pytest.raises(InvalidInput, match="cannot edit"):
        await store.edit(m.id, status="archived")
    with pytest.raises(InvalidInput, match="category"):
        await store.edit(m.id, category="nonsense")


async def test_pin_archive_restore_accept(store):
    m = (await store.add_memory("peanuts", category="health", key="allergy", status="held")).memory
    assert not await store.search("peanuts"), "held candidates are not current"
    assert (await store.accept(m.id)).status == "active"
    assert (await store.pin(m.id)).pinned
    assert (await store.archive(m.id)).status == "archived"
    assert not await store.search("peanuts")
    assert (await store.restore(m.id)).status == "active"
    assert not (await store.pin(m.id, False)).pinned
    actions = [h.action for h in await store.history(m.id)]
    assert actions == ["create", "accept", "pin", "archive", "restore", "unpin"]
    with pytest.raises(InvalidInput, match="cannot accept"):
        await store.accept(m.id)


async def test_unknown_ids_and_bad_values(store):
    for call in (
        store.get(99),
        store.pin(99),
        store.forget(99),
        store.edit(99, value="x"),
        store.history(99),
    ):
        with pytest.raises(NotFound, match="99"):
            await call
    for bad in (
        {"category": "feelings"},
        {"kind": "opinion"},
        {"source": "rumour"},
        {"confidence": 1.5},
    ):
        with pytest.raises(InvalidInput):
            await store.add_memory("value", **bad)
    with pytest.raises(InvalidInput, match="non-empty"):
        await store.add_memory("   ")


async def test_messages_hot_path(store):
    store.embedder = embedder = BagOfWordsEmbedder()  # so that a model call could happen
    session = await store.create_session("first chat")
    m1 = await store.save_message(session.id, "user", "hello there")
    m2 = await store.save_message(session.id, "assistant", "hi!", meta={"model": "llama3"})
    assert [m.id for m in await store.messages(session.id)] == [m1.id, m2.id]
    assert [m.id for m in await store.messages(session.id, after_id=m1.id)] == [m2.id]
    assert (await store.get_session(session.id)).last_active_at == m2.created_at
    with pytest.raises(NotFound, match="nope"):
        await store.save_message("nope", "user", "x")
    # Nothing of the failed save is left, and the next one works.
    assert await store.db.scalar("SELECT count(*) FROM messages") == 2
    assert await store.db.scalar("SELECT count(*) FROM messages_fts") == 2
    m3 = await store.save_message(session.id, "user", "still here")
    assert [m.id for m in await store.messages(session.id)] == [m1.id, m2.id, m3.id]
    with pytest.raises(InvalidInput, match="role"):
        await store.save_message(session.id, "narrator", "x")
    assert embedder.calls == 0  # no model call
    assert await store.db.scalar("SELECT count(*) FROM embeddings") == 0


async def test_versions_and_guards_on_changes(store):
    v1 = (await store.add_memory("Berlin", key="city")).memory
    v2 = (await store.add_memory("Paris", key="city")).memory
    v3 = await store.correct(v2.id, "Lisbon")
    assert [m.id for m in await store.versions(v3.id)] == [v2.id, v1.id]
    assert await store.versions(v1.id) == []
    with pytest.raises(InvalidInput, match="already has that value"):
        await store.correct(v3.id, " lisbon ")
    with pytest.raises(InvalidInput, match=f"replaced by #{v2.id}"):
        await store.edit(v1.id, value="Bonn")
    other = (await store.add_memory("tea", key="drink")).memory
    with pytest.raises(InvalidInput, match=f"#{v3.id} already holds user:city"):
        await store.edit(other.id, key="City")
    assert (await store.get(other.id)).key == "drink"


async def test_a_held_candidate_never_blocks_replacing_the_current_value(store):
    current = (await store.add_memory("Berlin", key="city")).memory
    held = (
        await store.add_memory("Rome", key="city", status="held", review_reason="uncertain")
    ).memory
    newer = await store.add_memory("Lisbon", key="city")
    assert newer.action == "superseded" and newer.replaced == current.id
    assert (await store.get(held.id)).status == "held"  # still waiting for review
    again = await store.add_memory("rome", key="city")
    assert again.action == "strengthened" and again.memory.id == held.id
    active, _ = await store.list_memories(kind="fact")
    assert [m.value for m in active] == ["Lisbon"]


async def test_accepting_a_held_value_replaces_the_current_one(store):
    current = (await store.add_memory("Berlin", key="city")).memory
    held = (await store.add_memory("Lisbon", key="city", status="held")).memory
    accepted = await store.accept(held.id)
    assert accepted.status == "active"
    old = await store.get(current.id)
    assert old.status == "superseded" and old.superseded_by == held.id


async def test_messages_can_be_read_from_the_end(store):
    session = await store.create_session()
    ids = [(await store.save_message(session.id, "user", f"m{i}")).id for i in range(5)]
    assert [m.id for m in await store.messages(session.id, last=2)] == ids[-2:]
    assert [m.id for m in await store.messages(session.id)] == ids
