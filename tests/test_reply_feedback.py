"""Rating replies: stored with the turn's ledger, flags the memories a bad reply used (and
changes none), kept 180 days, scrubbed by forgetting, memory-only in incognito."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import pytest

from navi_desktop.daemon.client import RpcCallError
from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.memory.feedback import FEEDBACK_DAYS
from navi_desktop.memory.store import MemoryStore
from tests.daemon_home import navi
from tests.fake_ollama import Reply, ThreadedFakeOllama
from tests.ledger_support import a_turn
from tests.pipeline_helpers import MODELS
from tests.tui_support import make_home

SECRET = "Zanzibarquux"


# -- the engine --------------------------------------------------------------------------------


async def test_a_down_rated_reply_flags_the_memories_it_used_and_changes_none(store):
    lisbon = (await store.add_memory("Lisbon", key="home city")).memory
    cello = (await store.add_memory("cello", key="instrument")).memory
    session = await store.create_session()
    _, good = await a_turn(store, session.id, [cello.id])
    turn, bad = await a_turn(store, session.id, [lisbon.id])
    await store.rate_reply(session.id, "up", message_id=good)
    rating = await store.rate_reply(session.id, "down", note="I moved, it's Porto now")
    assert (rating.message_id, rating.turn_id, rating.rating) == (bad, turn, "down")
    flagged = await store.flagged_memories()
    assert list(flagged) == [lisbon.id]  # not the memory of the well rated reply
    assert flagged[lisbon.id]["down_rated_replies"] == 1
    assert flagged[lisbon.id]["note"] == "I moved, it's Porto now"
    after = await store.get(lisbon.id)
    assert (after.value, after.status, after.confidence) == ("Lisbon", "active", lisbon.confidence)
    assert await store.feedback_counts() == {"up": 1, "down": 1}
    # Rated again: replaced, not added; an up-rating lifts the flag.
    await store.rate_reply(session.id, "up", message_id=bad)
    assert await store.flagged_memories() == {}
    assert await store.feedback_counts() == {"up": 2, "down": 0}
    assert [r.rating for r in await store.ratings(session.id)] == ["up", "up"]


async def test_what_cannot_be_rated_says_why(store):
    session = await store.create_session()
    with pytest.raises(NotFound, match="no reply to rate yet"):
        await store.rate_reply(session.id, "up")
    user, reply = await a_turn(store, session.id, [])
    with pytest.raises(InvalidInput, match="not a reply"):
        await store.rate_reply(session.id, "down", message_id=user)
    with pytest.raises(NotFound, match="no message 99999"):
        await store.rate_reply(session.id, "down", message_id=99999)
    with pytest.raises(NotFound, match="no session"):
        await store.rate_reply("nope", "down")
    with pytest.raises(InvalidInput, match="'up' or 'down'"):
        await store.rate_reply(session.id, "sideways")
    with pytest.raises(InvalidInput, match="at most 2000 characters"):
        await store.rate_reply(session.id, "down", note="x" * 2001)
    assert await store.ratings(session.id) == []
    other = await store.create_session()  # a reply of another session is not this one's
    with pytest.raises(NotFound, match=f"no message {reply}"):
        await store.rate_reply(other.id, "down", message_id=reply)


async def test_ratings_are_purged_after_their_retention_and_go_with_their_session(store):
    session = await store.create_session()
    await a_turn(store, session.id, [])
    await store.rate_reply(session.id, "down", note="too long")
    now = datetime.now(UTC)
    assert await store.purge_feedback(now=now + timedelta(days=FEEDBACK_DAYS - 1)) == 0
    assert await store.purge_feedback(now=now + timedelta(days=FEEDBACK_DAYS + 1)) == 1
    assert await store.ratings(session.id) == []
    await store.rate_reply(session.id, "up")
    await store.delete_session(session.id)
    assert await store.feedback_counts() == {"up": 0, "down": 0}


async def test_forgetting_scrubs_a_note_that_quotes_the_fact(tmp_path):
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        fact = (await store.add_memory(SECRET, key="locker code")).memory
        session = await store.create_session()
        await a_turn(store, session.id, [fact.id])
        await store.rate_reply(session.id, "down", note=f"my code is {SECRET}, not that")
        assert "1 note on a rated reply" in (await store.forget_preview(fact.id)).everywhere
        report = await store.forget(fact.id)
        assert "1 note on a rated reply" in report.redacted
        [rating] = await store.ratings(session.id)
        assert SECRET not in rating.note and rating.note.startswith("my code is ")
    assert SECRET.lower().encode() not in path.read_bytes().lower()


# -- through the daemon ------------------------------------------------------------------------


async def test_rating_through_the_daemon_flags_and_counts(fake, daemon):
    added = await daemon.call("memory.add", {"args": ["Lisbon"], "kwargs": {"key": "home city"}})
    fake.script(Reply("You live in Lisbon."))
    turn = await daemon.call("chat.send", {"text": "Which city is my home city, Lisbon?"})
    rated = await daemon.call(
        "chat.rate", {"session_id": turn["session_id"], "rating": "down", "note": "moved"}
    )
    assert rated["message_id"] == turn["reply_message_id"] and not rated["incognito"]
    flagged = (await daemon.call("feedback.flagged"))["memories"]
    assert flagged[str(added["memory"]["id"])]["note"] == "moved"
    listed = await daemon.call("chat.ratings", {"session_id": turn["session_id"]})
    assert [r["rating"] for r in listed["ratings"]] == ["down"]
    assert (await daemon.call("memory.stats"))["rated_replies"] == {"up": 0, "down": 1}
    for bad, says in [
        ({"rating": "meh"}, "rating"),
        ({"rating": "up", "message_id": 0}, "message_id"),
        ({"rating": "up", "note": "n" * 2001}, "note"),
    ]:
        with pytest.raises(RpcCallError, match=says):
            await daemon.call("chat.rate", {"session_id": turn["session_id"], **bad})


async def test_incognito_ratings_live_in_memory_only(fake, daemon):
    fake.script(Reply("Hello."), Reply("Bye."))
    first = await daemon.call("chat.send", {"text": "hi", "incognito": True})
    sid = first["session_id"]
    await daemon.call("chat.send", {"text": "bye", "session_id": sid})
    rated = await daemon.call("chat.rate", {"session_id": sid, "rating": "down", "note": "rude"})
    assert (rated["message_id"], rated["incognito"]) == (2, True)  # turn 2: the last reply
    await daemon.call("chat.rate", {"session_id": sid, "rating": "up", "message_id": 1})
    listed = await daemon.call("chat.ratings", {"session_id": sid})
    assert [(r["message_id"], r["rating"]) for r in listed["ratings"]] == [(1, "up"), (2, "down")]
    with pytest.raises(RpcCallError, match="turn number, 1 to 2"):
        await daemon.call("chat.rate", {"session_id": sid, "rating": "up", "message_id": 3})
    assert not daemon.paths.profile_db("tester").exists()  # nothing written anywhere


# -- the command line --------------------------------------------------------------------------


def test_navi_chat_rate(tmp_path):
    fake = ThreadedFakeOllama(MODELS).start()
    paths = make_home(tmp_path, fake.url)
    environ = {**os.environ, "NAVI_HOME": str(tmp_path / "home"), "OLLAMA_HOST": fake.url}
    try:
        fake.script(Reply("Paris is in Italy."))
        chat = navi(environ, "chat", "Where is Paris?")
        assert chat.returncode == 0, chat.stderr
        session = chat.stderr.strip().split()[-1]
        rated = navi(environ, "chat", "--rate", "down", "--note", "wrong country")
        assert rated.returncode == 0, rated.stderr
        assert f"of session {session}: down" in rated.stdout
        shown = navi(environ, "chat", "--rate", "up", "--session", session, "--json")
        assert json.loads(shown.stdout)["rating"] == "up"
        stats = navi(environ, "memory", "stats", "--profile", "tester")
        assert "Ratings     1 up, 0 down" in stats.stdout, stats.stdout + stats.stderr
        for args, says in [
            (("--rate", "up", "--reply", "99999"), "no message 99999"),
            (("--rate", "up", "hello"), "leave out the message"),
            (("--note", "why", "hello"), "go with --rate"),
        ]:
            refused = navi(environ, "chat", *args)
            assert refused.returncode != 0 and says in refused.stderr, refused.stderr
            assert (
                len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
            )
        # Incognito: the latest listed session is a stored one, which --rate took (and
        # wrote a note into); an incognito turn is rated by its session's id, in memory only.
        db = paths.profile_db("tester")
        files = [db, db.with_name("memory.db-wal")]
        before = [f.read_bytes() for f in files]
        fake.script(Reply("A secret answer."))
        hidden = navi(environ, "chat", "--incognito", "my code is ZQX42")
        assert hidden.returncode == 0, hidden.stderr
        hidden_id = hidden.stderr.strip().split()[-1]
        refused = navi(environ, "chat", "--incognito", "--rate", "down", "--note", "ZQX42")
        assert refused.returncode == 2 and "needs --session ID" in refused.stderr
        wrong = navi(environ, "chat", "--incognito", "--rate", "up", "--session", session)
        assert wrong.returncode != 0 and "no incognito session" in wrong.stderr, wrong.stderr
        rated = navi(environ, "chat", "--incognito", "--rate", "down", "--session", hidden_id)
        assert rated.returncode == 0 and f"Rated turn 1 of session {hidden_id}" in rated.stdout
        assert [f.read_bytes() for f in files] == before  # nothing written
    finally:
        navi(environ, "daemon", "stop")
        fake.stop()
    assert paths.profile_db("tester").exists()
