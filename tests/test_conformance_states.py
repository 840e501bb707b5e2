"""A memory's standing on both backends (the ``any_store`` fixture): archive and restore,
accept from the review inbox, confirm, correct, strengthen; each change shows in the lists and
in history, and a change that does not apply is refused in one line naming the fix."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.memory.facts import AWAITING_REPEAT, NewMemory
from navi_desktop.memory.sessions import SessionWrite


async def fact(store, value: str, **fields) -> int:
    return (await store.add_memory(value, **fields)).memory.id


async def actions(store, memory_id: int) -> list[str]:
    return [h.action for h in await store.history(memory_id)]


async def test_archive_and_restore_move_a_memory_between_lists(any_store):
    tea = await fact(any_store, "green tea", category="preferences", key="drink")
    await any_store.set_meta("profile_summary_stale", None)

    archived = await any_store.archive(tea)
    assert archived.status == "archived"
    assert (await any_store.list_memories())[1] == 0
    shelved, total = await any_store.list_memories(status="archived")
    assert ([m.id for m in shelved], total) == ([tea], 1)
    assert await any_store.get_meta("profile_summary_stale") == "1"  # the profile changed
    with pytest.raises(InvalidInput, match=f"cannot archive memory {tea}: it is archived"):
        await any_store.archive(tea)

    restored = await any_store.restore(tea, actor="tui")
    assert (restored.status, restored.strength) == ("active", 1.0)
    assert [m.id for m in (await any_store.list_memories())[0]] == [tea]
    history = await any_store.history(tea)
    assert [h.action for h in history] == ["create", "archive", "restore"]
    assert (history[2].actor, history[2].old, history[2].new) == (
        "tui",
        {"status": "archived", "pinned": 0},
        {"status": "active", "pinned": 0},
    )
    with pytest.raises(InvalidInput, match=f"cannot restore memory {tea}: it is active"):
        await any_store.restore(tea)


async def test_accepting_a_held_candidate_makes_it_the_current_value(any_store):
    tea = await fact(any_store, "tea", category="preferences", key="drink")
    coffee = await fact(
        any_store,
        "coffee",
        category="preferences",
        key="drink",
        status="held",
        review_reason="sensitive",
    )
    accepted = await any_store.accept(coffee)
    assert (accepted.status, accepted.review_reason) == ("active", None)
    old = await any_store.get(tea)
    assert (old.status, old.superseded_by) == ("superseded", coffee)
    assert [m.value for m in (await any_store.list_memories(kind="fact"))[0]] == ["coffee"]
    assert await actions(any_store, coffee) == ["create", "accept", "supersedes"]
    assert await actions(any_store, tea) == ["create", "superseded"]
    with pytest.raises(InvalidInput, match=f"cannot accept memory {coffee}: it is active"):
        await any_store.accept(coffee)


async def test_confirm_pins_a_fact_at_full_confidence(any_store):
    city = await fact(any_store, "Lisbon", key="home city", confidence=0.6)
    confirmed = await any_store.confirm(city)
    assert (confirmed.pinned, confirmed.confidence, confirmed.strength) == (True, 1.0, 1.0)
    assert confirmed.last_verified_at is not None
    entry = (await any_store.history(city))[-1]
    assert entry.action == "confirm"
    assert entry.old == {"pinned": 0, "confidence": 0.6, "last_verified_at": None}
    assert entry.new == {
        "pinned": 1,
        "confidence": 1.0,
        "last_verified_at": confirmed.last_verified_at,
    }
    assert [m.id for m in (await any_store.list_memories(pinned=True))[0]] == [city]


async def test_what_cannot_be_confirmed_says_what_to_do(any_store):
    rule = await fact(any_store, "answer in French", kind="rule")
    held = await fact(any_store, "Porto", key="work city", status="held", review_reason="unsure")
    old = await fact(any_store, "cello", key="instrument")
    new = await fact(any_store, "viola", key="instrument")
    shelved = await fact(any_store, "chess", key="game")
    await any_store.archive(shelved)
    for memory_id, said in [
        (rule, f"memory {rule} is a rule: only a fact can be confirmed (pin it to keep it)"),
        (held, f"cannot confirm memory {held}: it is held; accept it from the review inbox"),
        (old, f"it is superseded; confirm the version that replaced it (#{new})"),
        (shelved, f"cannot confirm memory {shelved}: it is archived; restore it first"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            await any_store.confirm(memory_id)
        assert said in str(caught.value) and "\n" not in str(caught.value)
        assert not (await any_store.get(memory_id)).pinned  # nothing changed
    with pytest.raises(NotFound, match="no memory with id 999999"):
        await any_store.confirm(999999)


async def test_correct_writes_a_new_version_that_keeps_pin_and_expiry(any_store):
    soon = (date.today() + timedelta(days=7)).isoformat()
    trip = await fact(
        any_store,
        "in Lisbon",
        category="projects",
        key="travel",
        evidence="I'm in Lisbon",
        expires_at=soon,
    )
    await any_store.pin(trip)
    fixed = await any_store.correct(trip, "in Porto", evidence="actually Porto", actor="tui")
    assert fixed.id != trip
    assert (fixed.value, fixed.key, fixed.category, fixed.source) == (
        "in Porto",
        "travel",
        "projects",
        "user_explicit",
    )
    assert (fixed.pinned, fixed.evidence, fixed.expires_at) == (
        True,
        "actually Porto",
        (await any_store.get(trip)).expires_at,
    )
    old = await any_store.get(trip)
    assert (old.status, old.superseded_by) == ("superseded", fixed.id)
    assert [v.id for v in await any_store.versions(fixed.id)] == [trip]
    assert await actions(any_store, fixed.id) == ["create", "supersedes"]
    assert (await any_store.history(trip))[-1].actor == "tui"
    with pytest.raises(InvalidInput, match=f"memory {fixed.id} already has that value"):
        await any_store.correct(fixed.id, "  IN PORTO ")
    with pytest.raises(InvalidInput, match=f"memory {trip} is superseded; only a current one"):
        await any_store.correct(trip, "in Faro")
    with pytest.raises(InvalidInput, match="a memory needs a non-empty value"):
        await any_store.correct(fixed.id, "   ")
    with pytest.raises(NotFound, match="no memory with id 999999"):
        await any_store.correct(999999, "x")
    assert (await any_store.list_memories(status=None))[1] == 2  # the refusals wrote nothing


async def test_strengthen_counts_a_mention_and_promotes_a_waiting_candidate(any_store):
    city = await fact(any_store, "Lisbon", key="home city", confidence=0.5)
    once = await any_store.strengthen(city, confidence=0.8)
    assert once.action == "strengthened"
    assert (once.memory.mentions, once.memory.confidence) == (2, 0.8)
    again = await any_store.strengthen(city)  # a lower confidence never lowers it
    assert (again.memory.mentions, again.memory.confidence) == (3, 0.8)
    entry = (await any_store.history(city))[-1]
    assert (entry.action, entry.actor, entry.new) == ("strengthen", "extraction", {"mentions": 3})

    waiting = await fact(
        any_store, "Rust", key="language", status="held", review_reason=AWAITING_REPEAT
    )
    promoted = await any_store.strengthen(waiting, actor="user")
    assert (promoted.memory.status, promoted.memory.review_reason) == ("active", None)
    assert (await any_store.history(waiting))[-1].new == {"mentions": 2, "status": "active"}
    with pytest.raises(NotFound, match="no memory with id 999999"):
        await any_store.strengthen(999999)


async def test_edit_fixes_a_memory_in_place_and_refuses_what_it_may_not(any_store):
    cello = await fact(any_store, "cello", category="other", key="instrument")
    chess = await fact(any_store, "chess club on Mondays", category="other", key="game")
    edited = await any_store.edit(chess, value="  chess club on Tuesdays ", actor="tui")
    assert (edited.id, edited.value) == (chess, "chess club on Tuesdays")
    entry = (await any_store.history(chess))[-1]
    assert (entry.action, entry.actor, entry.old, entry.new) == (
        "edit",
        "tui",
        {"value": "chess club on Mondays"},
        {"value": "chess club on Tuesdays"},
    )
    assert [h.id for h in await any_store.search("Tuesdays")] == [chess]  # re-indexed
    assert await any_store.search("Mondays") == []
    # The same value again is no change: no history row.
    await any_store.edit(chess, value="chess club on Tuesdays")
    assert await actions(any_store, chess) == ["create", "edit"]
    with pytest.raises(InvalidInput, match=f"memory #{cello} already holds user:instrument"):
        await any_store.edit(chess, key="Instrument")
    with pytest.raises(InvalidInput, match="cannot edit status; editable: category"):
        await any_store.edit(chess, status="archived")
    with pytest.raises(InvalidInput, match="a memory needs a non-empty value"):
        await any_store.edit(chess, value="  ")
    viola = await fact(any_store, "viola", category="other", key="instrument")
    with pytest.raises(InvalidInput, match=f"memory {cello} was replaced by #{viola}; edit that"):
        await any_store.edit(cello, value="double bass")
    assert (await any_store.get(chess)).key == "game"  # the refusals changed nothing
    assert (await any_store.get(cello)).value == "cello"


async def test_a_session_end_promotes_a_waiting_candidate_once(any_store):
    """Both backends run one commit: a candidate that waited for a repetition and is said
    again becomes current and replaces the value it contradicted; the same end committed
    twice (a second daemon, a retry) learns nothing twice; an unknown session is refused."""
    await any_store.create_session(session_id="s1")
    first = (await any_store.save_message("s1", "user", "I live in Paris")).id
    paris = await fact(any_store, "Paris", category="profile", subject="user", key="city")
    waiting = await fact(
        any_store,
        "Berlin",
        category="profile",
        subject="user",
        key="city",
        status="held",
        review_reason=AWAITING_REPEAT,
    )
    again = NewMemory(
        value="Berlin", category="profile", subject="user", key="city", source="conversation"
    )
    end = [SessionWrite("strengthen", again, target_id=waiting)]

    done = await any_store.commit_session("s1", first, end, None)
    assert done.ids == {"strengthened": [waiting], "promoted": [waiting]}
    assert (await any_store.get(waiting)).status == "active"
    assert (await any_store.get(paris)).status == "superseded"
    assert (await any_store.get_session("s1")).processed_upto == first

    assert (await any_store.commit_session("s1", first, end, None)).ids == {}
    assert (await any_store.get(waiting)).mentions == 2  # strengthened once, not twice
    with pytest.raises(InvalidInput, match="no session with id 'nope'"):
        await any_store.commit_session("nope", first, end, None)


async def test_a_chunk_that_does_not_move_the_watermark_still_commits(any_store):
    """One long message split across chunks: the first chunk's end is no watermark (the
    pipeline passes 0), and what it learned must land all the same."""
    await any_store.create_session(session_id="s1")
    await any_store.save_message("s1", "user", "I moved to Porto " * 50)
    write = SessionWrite("add", NewMemory(value="Porto", key="city", source="conversation"))
    done = await any_store.commit_session("s1", 0, [write], None)
    assert len(done.ids["added"]) == 1
    assert (await any_store.get(done.ids["added"][0])).value == "Porto"
    assert (await any_store.get_session("s1")).processed_upto == 0
