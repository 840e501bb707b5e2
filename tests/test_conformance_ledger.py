"""The injection ledger and reply feedback on both backends (the ``any_store`` fixture): what
went into a turn's prompt is read back in rank order with its signals; rating a reply flags the
memories it used and changes none; what cannot be recorded or rated is named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.memory.feedback import FEEDBACK_DAYS
from navi_desktop.memory.ledger import Injection
from navi_desktop.memory.models import Signal
from tests.ledger_support import a_turn


async def test_a_turns_injections_are_read_back_in_rank_order(any_store):
    city = (await any_store.add_memory("Lisbon", key="home city")).memory
    rule = (await any_store.add_memory("answer in French", kind="rule")).memory
    gone = (await any_store.add_memory("cello", key="instrument")).memory
    session = await any_store.create_session()
    user = await any_store.save_message(session.id, "user", "Where do I live?")
    await any_store.forget(gone.id)  # went between the search and the ledger
    await any_store.record_injections(
        session.id,
        user.id,
        [
            Injection(
                city.id, 2, 0.031, {"text": Signal(1, 2.5), "vector": Signal(3, 0.82)}, "relevant"
            ),
            Injection(rule.id, 1, 1.0, {}, "rule"),
            Injection(gone.id, 3, 0.01, {"text": Signal(2, 1.0)}, "relevant"),
        ],
    )
    used = await any_store.injections_for(user.id)
    assert [(i.memory_id, i.rank, i.reason) for i in used] == [
        (rule.id, 1, "rule"),
        (city.id, 2, "relevant"),
    ]
    assert used[1].score == pytest.approx(0.031)
    assert used[1].signals == {"text": Signal(1, 2.5), "vector": Signal(3, 0.82)}
    assert used[1].memory.value == "Lisbon" and used[0].signals == {}
    assert used[1].to_dict()["memory"]["id"] == city.id
    # Used: recall marks them (and slows their decay).
    for memory_id in (city.id, rule.id):
        marked = await any_store.get(memory_id)
        assert marked.last_used_at is not None and marked.strength == 1.0
    assert await any_store.injections_for(999999) == []
    assert await any_store.record_injections(session.id, user.id, []) is None


async def test_a_ledger_row_must_name_a_real_turn(any_store):
    city = (await any_store.add_memory("Lisbon", key="home city")).memory
    one = await any_store.create_session()
    other = await any_store.create_session()
    said = await any_store.save_message(one.id, "user", "hello")
    used = [Injection(city.id, 1, 1.0, {}, "relevant")]
    with pytest.raises(NotFound, match="no session with id 'nope'"):
        await any_store.record_injections("nope", None, used)
    with pytest.raises(NotFound, match=f"no message {said.id} in session '{other.id}'"):
        await any_store.record_injections(other.id, said.id, used)
    with pytest.raises(NotFound, match=f"no message 999999 in session '{one.id}'"):
        await any_store.record_injections(one.id, 999999, used)
    assert (await any_store.get(city.id)).last_used_at is None  # nothing was written
    await any_store.record_injections(one.id, None, used)  # a turn without a message is fine
    assert (await any_store.get(city.id)).last_used_at is not None


async def test_a_down_rated_reply_flags_the_memories_it_used_and_changes_none(any_store):
    lisbon = (await any_store.add_memory("Lisbon", key="home city")).memory
    cello = (await any_store.add_memory("cello", key="instrument")).memory
    session = await any_store.create_session()
    _, good = await a_turn(any_store, session.id, [cello.id])
    turn, bad = await a_turn(any_store, session.id, [lisbon.id, cello.id])
    await any_store.rate_reply(session.id, "up", message_id=good)
    rating = await any_store.rate_reply(session.id, "down", note="  I moved, it's Porto now ")
    assert (rating.message_id, rating.turn_id, rating.rating) == (bad, turn, "down")
    assert rating.note == "I moved, it's Porto now"
    assert await any_store.rating_of(bad) == rating
    assert await any_store.rating_of(turn) is None
    flagged = await any_store.flagged_memories()
    assert sorted(flagged) == [lisbon.id, cello.id]
    assert flagged[lisbon.id] == {
        "down_rated_replies": 1,
        "at": rating.at,
        "note": "I moved, it's Porto now",
    }
    after = await any_store.get(lisbon.id)
    assert (after.value, after.status, after.confidence) == ("Lisbon", "active", 1.0)
    assert await any_store.feedback_counts() == {"up": 1, "down": 1}
    # Rated again: replaced, not added; an up-rating lifts the flag.
    again = await any_store.rate_reply(session.id, "up", message_id=bad)
    assert (again.rating, again.note) == ("up", None)
    assert await any_store.flagged_memories() == {}
    assert await any_store.feedback_counts() == {"up": 2, "down": 0}
    assert [(r.message_id, r.rating) for r in await any_store.ratings(session.id)] == [
        (good, "up"),
        (bad, "up"),
    ]


async def test_what_cannot_be_rated_says_why(any_store):
    session = await any_store.create_session()
    with pytest.raises(NotFound, match="no reply to rate yet"):
        await any_store.rate_reply(session.id, "up")
    user, reply = await a_turn(any_store, session.id, [])
    with pytest.raises(InvalidInput, match=f"message {user} is not a reply"):
        await any_store.rate_reply(session.id, "down", message_id=user)
    with pytest.raises(NotFound, match="no message 999999"):
        await any_store.rate_reply(session.id, "down", message_id=999999)
    with pytest.raises(NotFound, match="no session 'nope'"):
        await any_store.rate_reply("nope", "down")
    with pytest.raises(InvalidInput, match="'up' or 'down'"):
        await any_store.rate_reply(session.id, "sideways")
    with pytest.raises(InvalidInput, match="at most 2000 characters"):
        await any_store.rate_reply(session.id, "down", note="x" * 2001)
    other = await any_store.create_session()  # a reply of another session is not this one's
    with pytest.raises(NotFound, match=f"no message {reply} in session '{other.id}'"):
        await any_store.rate_reply(other.id, "down", message_id=reply)
    assert await any_store.ratings(session.id) == []
    assert await any_store.feedback_counts() == {"up": 0, "down": 0}


async def test_ratings_are_purged_after_their_retention(any_store):
    session = await any_store.create_session()
    await a_turn(any_store, session.id, [])
    await any_store.rate_reply(session.id, "down", note="too long")
    now = datetime.now(UTC)
    assert await any_store.purge_feedback(now=now + timedelta(days=FEEDBACK_DAYS - 1)) == 0
    assert len(await any_store.ratings(session.id)) == 1
    assert await any_store.purge_feedback(days=1, now=now + timedelta(days=2)) == 1
    assert await any_store.ratings(session.id) == []
    assert await any_store.feedback_counts() == {"up": 0, "down": 0}
