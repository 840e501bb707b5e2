"""One conformance suite, run against both storage backends (the ``any_store`` fixture: a
SQLite file and a real PostgreSQL), so neither can drift from the engine API."""

from __future__ import annotations

import pytest

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.memory import NewMemory
from navi_desktop.memory import forget as forget_module
from navi_desktop.memory.sessions import SessionWrite


async def test_sessions_and_messages_keep_order(any_store):
    s = await any_store.create_session("first", session_id="s1")
    assert s.id == "s1" and s.state == "open"
    with pytest.raises(InvalidInput, match="already exists"):
        await any_store.create_session(session_id="s1")
    ids = [
        (await any_store.save_message("s1", role, text)).id
        for role, text in [("user", "hello there"), ("assistant", "hi!"), ("user", "bye")]
    ]
    assert ids == sorted(ids)
    assert [m.content for m in await any_store.messages("s1")] == ["hello there", "hi!", "bye"]
    assert [m.content for m in await any_store.messages("s1", last=2)] == ["hi!", "bye"]
    assert [m.id for m in await any_store.messages("s1", after_id=ids[0])] == ids[1:]
    listed = await any_store.list_sessions()
    assert [x.id for x in listed] == ["s1"] and listed[0].preview == "hello there"
    assert (await any_store.rename_session("s1", "  renamed ")).title == "renamed"


async def test_bad_session_and_role_are_named(any_store):
    with pytest.raises(NotFound, match="no session"):
        await any_store.save_message("nope", "user", "hi")
    await any_store.create_session(session_id="s1")
    with pytest.raises(InvalidInput, match="role must be"):
        await any_store.save_message("s1", "robot", "hi")
    with pytest.raises(NotFound):
        await any_store.get_session("nope")
    assert await any_store.messages("s1") == []


async def test_same_fact_strengthens_new_value_supersedes(any_store):
    first = await any_store.add_memory(
        "Lisbon", category="profile", key="home city", evidence="I live in Lisbon"
    )
    assert first.action == "added"
    again = await any_store.add_memory("lisbon", category="profile", key="home city")
    assert again.action == "strengthened" and again.memory.mentions == 2
    moved = await any_store.add_memory("Porto", category="profile", key="home_city")
    assert moved.action == "superseded" and moved.replaced == first.memory.id
    old = await any_store.get(first.memory.id)
    assert old.status == "superseded" and old.superseded_by == moved.memory.id
    assert [v.id for v in await any_store.versions(moved.memory.id)] == [first.memory.id]
    actions = [h.action for h in await any_store.history(first.memory.id)]
    assert actions == ["create", "strengthen", "superseded"]
    current, total = await any_store.list_memories(kind="fact")
    assert total == 1 and current[0].value == "Porto"


async def test_held_candidate_replaces_nothing(any_store):
    await any_store.add_memory("tea", category="preferences", key="drink")
    held = await any_store.add_memory(
        "coffee", category="preferences", key="drink", status="held", review_reason="unsure"
    )
    assert held.action == "added" and held.memory.status == "held"
    active, _ = await any_store.list_memories(kind="fact")
    assert [m.value for m in active] == ["tea"]


async def test_a_batch_lands_whole_or_not_at_all(any_store):
    with pytest.raises(NotFound):
        await any_store.add_memories(
            [NewMemory("one", key="a"), NewMemory("two", key="b", session_id="missing")]
        )
    assert (await any_store.list_memories(status=None))[1] == 0


async def test_pin_edit_and_list_filters(any_store):
    a = (await any_store.add_memory("Rust", category="technical", key="language")).memory
    b = (await any_store.add_memory("climbing", category="other", key="hobby")).memory
    pinned = await any_store.pin(a.id)
    assert pinned.pinned and pinned.strength == 1.0
    page, total = await any_store.list_memories(pinned=True)
    assert total == 1 and page[0].id == a.id
    _, total = await any_store.list_memories(category="other")
    assert total == 1
    edited = await any_store.edit(b.id, value="bouldering")
    assert edited.value == "bouldering"
    assert [h.action for h in await any_store.history(b.id)][-1] == "edit"
    assert [h.memory.id for h in await any_store.search("bouldering")] == [b.id]
    assert await any_store.search("climbing") == []
    with pytest.raises(InvalidInput, match="cannot edit"):
        await any_store.edit(b.id, status="archived")
    with pytest.raises(InvalidInput):
        await any_store.list_memories(kind="nonsense")


async def test_search_finds_by_words_names_and_meaning(any_store):
    await any_store.create_session(session_id="s1")
    await any_store.save_message("s1", "user", "My sister Maria moved to Berlin last spring")
    cat = (await any_store.add_memory("Mochi", category="other", key="cat name")).memory
    maria = (
        await any_store.add_memory("nurse", subject="Maria", category="relationships", key="job")
    ).memory
    assert (await any_store.search("what is my cat called?"))[0].memory.id == cat.id
    hits = await any_store.search("Maria")
    assert hits[0].memory.id == maria.id and "entity" in hits[0].signals
    messages = await any_store.search("Berlin spring", kinds=["message"])
    assert len(messages) == 1 and "Berlin" in messages[0].message.content
    assert await any_store.search("Mochi", categories=["health"]) == []
    # meaning: vectors written later, found without a shared word once embedded
    assert await any_store.backfill_embeddings() >= 3
    assert "vector" in (await any_store.search("Mochi cat"))[0].signals


async def test_common_words_stay_within_the_row_budget(any_store, monkeypatch):
    """As in Lucene's common-terms query: a word matching more rows than the budget is left
    out when a rarer word is there, and alone only its newest matches are ranked."""
    import navi_desktop.memory.pg.search as pg_search
    import navi_desktop.memory.search as file_search

    for module in (file_search, pg_search):
        monkeypatch.setattr(module, "BM25_ROW_BUDGET", 4)
    coffee = [(await any_store.add_memory(f"coffee at cafe {i}")).memory.id for i in range(7)]
    tea = (await any_store.add_memory("tea and coffee on Sundays")).memory
    worded = [h.memory.id for h in await any_store.search("coffee tea") if "bm25" in h.signals]
    assert worded == [tea.id]
    hits = await any_store.search("coffee", limit=20)
    worded = {h.memory.id for h in hits if "bm25" in h.signals}
    assert worded == {tea.id, *coffee[-3:]}  # the newest four


@pytest.mark.parametrize(
    "text", ['"', "OR AND NOT", "-(*)", "'; DROP TABLE memories; --", "", "   ", "ü" * 300, "a:b"]
)
async def test_odd_search_text_is_just_text(any_store, text):
    await any_store.add_memory("Lisbon", key="home city")
    assert isinstance(await any_store.search(text), list)


async def test_forget_removes_every_copy_and_stays_forgotten(any_store):
    await any_store.create_session(session_id="s1")
    said = await any_store.save_message("s1", "user", "my bank PIN is 4921, keep it safe")
    old = (
        await any_store.add_memory("PIN 4921", key="bank pin", evidence="my bank PIN is 4921")
    ).memory
    new = (await any_store.add_memory("PIN 7310", key="bank pin")).memory
    await any_store.backfill_embeddings()
    report = await any_store.forget(new.id)
    assert set(report.forgotten) >= {old.id, new.id}
    for gone in (old.id, new.id):
        with pytest.raises(NotFound):
            await any_store.get(gone)
    (message,) = await any_store.messages("s1")
    assert message.id == said.id and "4921" not in message.content
    assert await any_store.search("4921", kinds=["fact", "message"]) == []
    assert await any_store.is_forgotten("PIN 7310", key="bank pin")
    blocked = await any_store.add_memory(
        "PIN 7310", key="bank pin", source="conversation", actor="extraction"
    )
    assert blocked.action == "blocked"
    back = await any_store.add_memory("PIN 7310", key="bank pin")  # the user, by hand
    assert back.action == "added"


async def test_a_forgotten_phrase_is_found_in_a_long_text(any_store, monkeypatch):
    """A text's phrases are looked up a chunk of hashes at a time (a server takes 32,767
    parameters a statement): one at a time here, so the forgotten one is in a later chunk."""
    monkeypatch.setattr(forget_module, "PHRASE_CHUNK", 1)
    pin = (await any_store.add_memory("PIN 7310", key="bank pin")).memory
    await any_store.forget(pin.id)
    text = " ".join(f"word{i}" for i in range(40)) + " then PIN 7310 " + "more words " * 20
    assert await any_store.contains_forgotten([text])
    assert not await any_store.contains_forgotten([text.replace("7310", "7311")])
    later = await any_store.add_memory(
        "a note", key="note", evidence=text, source="conversation", actor="extraction"
    )
    assert later.action == "blocked"


async def test_session_end_commits_writes_summary_and_watermark(any_store):
    await any_store.create_session(session_id="s1")
    first = await any_store.save_message("s1", "user", "I started learning Go")
    last = await any_store.save_message("s1", "assistant", "Nice!")
    assert [s.id for s in await any_store.sessions_to_process(include_open=True)] == ["s1"]
    done = await any_store.commit_session(
        "s1",
        last.id,
        [SessionWrite("add", NewMemory("Go", key="learning", source="conversation"))],
        "The user talked about learning Go.",
        first_message_id=first.id,
    )
    assert done.summary_id is not None and len(done.ids["added"]) == 1
    session = await any_store.get_session("s1")
    assert session.processed_upto == last.id and session.state == "ended"
    assert await any_store.unprocessed_messages("s1") == []
    assert (await any_store.latest_summary()).value == "The user talked about learning Go."
    assert await any_store.sessions_to_process(include_open=True) == []


async def test_failed_session_end_waits_with_its_reason(any_store):
    await any_store.create_session(session_id="s1")
    await any_store.save_message("s1", "user", "hello")
    pending = await any_store.mark_pending("s1", "model unreachable")
    assert pending.state == "pending" and pending.pending_reason == "model unreachable"
    assert await any_store.sessions_to_process(include_open=True) == []  # retry later


async def test_meta_profile_summary_and_stats(any_store):
    await any_store.set_meta("x", "1")
    assert await any_store.get_meta("x") == "1"
    await any_store.set_meta("x", None)
    assert await any_store.get_meta("x") is None
    await any_store.add_memory("Oslo", key="home city")
    assert (await any_store.profile_summary())[1] is True  # stale after a change
    await any_store.set_profile_summary("Lives in Oslo.")
    assert await any_store.profile_summary() == ("Lives in Oslo.", False)
    stats = await any_store.stats()
    assert stats["memories"] == {"fact": {"active": 1}} and stats["sessions"] == 0


async def test_a_fact_said_again_with_a_new_expiry_takes_it(any_store):
    from datetime import UTC, datetime, timedelta

    from navi_desktop.memory.clock import iso

    soon = iso(datetime.now(UTC) + timedelta(days=2))
    later = iso(datetime.now(UTC) + timedelta(days=9))
    first = (await any_store.add_memory("Berlin", key="staying in", expires_at=soon)).memory
    again = await any_store.add_memory("Berlin", key="staying in", expires_at=later)
    assert again.action == "strengthened" and again.memory.id == first.id
    assert again.memory.expires_at[:16] == later[:16]
    edits = [h for h in await any_store.history(first.id) if h.action == "edit"]
    assert [e.new["expires_at"][:16] for e in edits] == [later[:16]]


async def test_stats_say_the_same_things_on_both(any_store, tmp_path):
    from navi_desktop.memory import MemoryStore

    async with await MemoryStore.open(tmp_path / "reference.db") as reference:
        expected = set(await reference.stats()) - {"file_bytes"}  # a file's own
    stats = await any_store.stats()
    assert expected <= set(stats)
    assert stats["pending_scrubs"] == [] and stats["rated_replies"] is not None
