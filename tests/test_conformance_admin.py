"""Conformance, part two: maintenance, scrubs, session administration and the forget preview,
each run on both backends (``any_store``: a SQLite file and a real PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.memory import NewMemory
from navi_desktop.memory.clock import iso
from navi_desktop.memory.matching import MARKER
from tests.fakes import BagOfWordsEmbedder
from tests.pg_support import as_role, profile_name


def later(days: float) -> str:
    return iso(datetime.now(UTC) + timedelta(days=days))


async def test_decay_fades_and_archives_the_weak_unpinned_facts(any_store):
    stale = (await any_store.add_memory("liked a 2019 band", key="band")).memory
    pinned = (await any_store.add_memory("blood type O+", key="blood type")).memory
    await any_store.pin(pinned.id)
    repeated = (await any_store.add_memory("likes chess", key="game")).memory
    for _ in range(5):
        await any_store.add_memory("likes chess", key="game")
    rule = (await any_store.add_memory("no emojis", kind="rule")).memory
    await any_store.set_profile_summary("Likes a band and chess.")

    report = await any_store.decay(now=later(150))
    assert report.archived == [stale.id] and report.updated == 1
    assert (await any_store.get(stale.id)).status == "archived"
    last = (await any_store.history(stale.id))[-1]
    assert (last.action, last.actor, last.old) == ("archive", "decay", {"status": "active"})
    assert last.new["status"] == "archived" and last.new["strength"] < 0.05
    assert (await any_store.get(pinned.id)).strength == 1.0
    kept = await any_store.get(repeated.id)
    assert kept.status == "active" and 0.5 < kept.strength < 1.0
    assert (await any_store.get(rule.id)).status == "active"
    assert (await any_store.profile_summary())[1] is True  # archiving changes the profile
    assert await any_store.search("band") == []

    await any_store.touch([repeated.id])  # used in a prompt: strong again
    used = await any_store.get(repeated.id)
    assert used.strength == 1.0 and used.last_used_at is not None
    await any_store.touch([])
    again = await any_store.decay(now=later(150))  # the touched one fades again from 1.0
    assert again.archived == [] and again.updated == 1
    assert (await any_store.decay(now=later(150))).updated == 0  # nothing left to change


async def test_expiry_archives_current_facts_pinned_too(any_store):
    soon = (await any_store.add_memory("in Rome", key="location", expires_at=later(2))).memory
    await any_store.pin(soon.id)
    held = (
        await any_store.add_memory(
            "at a hotel", key="stay", status="held", review_reason="unsure", expires_at=later(2)
        )
    ).memory
    lasting = (await any_store.add_memory("Lisbon", key="home city")).memory
    assert await any_store.archive_expired(now=later(1)) == []
    assert await any_store.archive_expired(now=later(3)) == [soon.id, held.id]
    assert (await any_store.get(soon.id)).status == "archived"
    last = (await any_store.history(held.id))[-1]
    assert (last.actor, last.old) == ("system", {"status": "held"})
    assert last.new["reason"] == "it expired" and last.new["expires_at"]
    assert (await any_store.get(lasting.id)).status == "active"
    assert await any_store.archive_expired(now=later(3)) == []
    with pytest.raises(InvalidInput):
        await any_store.archive_expired(now="yesterday")


async def test_optimize_and_missing_embeddings(any_store):
    await any_store.create_session(session_id="s1")
    await any_store.save_message("s1", "user", "hello")
    await any_store.add_memory("tea", key="drink")
    await any_store.add_memory("old", key="gone", status="held", review_reason="unsure")
    assert await any_store.missing_embeddings() == 3  # two memories and a message
    await any_store.backfill_embeddings()
    assert await any_store.missing_embeddings() == 0
    await any_store.optimize()
    # a new model: everything is missing again, and the old vectors go once all have new ones
    any_store.embedder = BagOfWordsEmbedder("test/other-32", 32)
    assert await any_store.missing_embeddings() == 3
    assert await any_store.backfill_embeddings(messages=False) == 2
    models = {(e["model"], e["count"]) for e in (await any_store.stats())["embeddings"]}
    assert models == {("test/bow-64", 3), ("test/other-32", 2)}  # a message still waits
    assert await any_store.backfill_embeddings() == 1
    new_only = [{"model": "test/other-32", "dim": 32, "count": 3}]
    if any_store.shares_vectors:  # perhaps another machine's model: kept until unused a month
        assert len((await any_store.stats())["embeddings"]) == 2
        assert await any_store.drop_unused_models() == 0
        assert await any_store.drop_unused_models(now="2999-01-01T00:00:00.000Z") == 3
    assert (await any_store.stats())["embeddings"] == new_only


async def test_optimize_refreshes_the_servers_statistics(pg_dsn):
    """ANALYZE as the tables' owner: the working role (navi_local) would be skipped."""
    async with await _pg_store(pg_dsn) as store:
        for i in range(5):
            await store.add_memory(f"fact {i}", key=f"k{i}")
        await store.optimize()
        conn = await asyncpg.connect(pg_dsn)
        try:
            rows, estimate = await conn.fetchrow(
                "SELECT (SELECT count(*) FROM navi.memories), reltuples FROM pg_class"
                " WHERE oid = 'navi.memories'::regclass"
            )
        finally:
            await conn.close()
    assert estimate == rows


async def _pg_store(dsn: str):
    from navi_desktop.memory.pg import PgMemoryStore

    return await PgMemoryStore.open(dsn, profile_name())


async def test_forget_scrub_completes_and_summaries_can_be_rewritten(any_store):
    await any_store.create_session("Marta's party", session_id="s1")
    await any_store.save_message("s1", "user", "my ex is called Marta")
    fact = (await any_store.add_memory("Marta", key="ex name", evidence="my ex is Marta")).memory
    summary = (
        await any_store.add_memory(
            "Talked about Marta and the party.", kind="episode", session_id="s1"
        )
    ).memory
    other = (await any_store.add_memory("likes parties", key="social")).memory
    await any_store.edit(other.id, evidence="Marta threw one")
    await any_store.set_profile_summary("Once dated Marta.")
    report = await any_store.forget(fact.id)
    assert report.scrub_pending is None and await any_store.pending_scrubs() == []
    assert await any_store.retry_scrubs() == []
    assert report.redacted == [
        "1 message in 1 session",
        "1 session title",
        "1 session summary",
        "the profile summary",
        "1 other memory (redacted)",
        "2 history rows of other memories",
        "1 entity name",
    ]
    assert "Marta" not in (await any_store.get_session("s1")).title
    assert "Marta" not in (await any_store.profile_summary())[0]
    assert all("Marta" not in repr(h) for h in await any_store.history(other.id))

    (redacted,) = await any_store.redacted_summaries()
    assert redacted.id == summary.id and MARKER in redacted.value
    assert not await any_store.rewrite_summary(summary.id, "something else", "x")
    assert not await any_store.rewrite_summary(other.id, (await any_store.get(other.id)).value, "x")
    assert await any_store.rewrite_summary(summary.id, redacted.value, "Talked about a party.")
    assert await any_store.redacted_summaries() == []
    assert (await any_store.get(summary.id)).value == "Talked about a party."
    assert [h.action for h in await any_store.history(summary.id)][-1] == "rewrite"
    assert [h.memory.id for h in await any_store.search("party", kinds=["episode"])] == [summary.id]


async def test_a_login_that_does_not_own_the_tables_leaves_the_scrub_pending(pg_dsn):
    """On a shared server a daemon's role cannot VACUUM the tables: the forget is done, and
    says honestly that the dead rows wait for autovacuum or the owner."""
    from navi_desktop.memory.pg import PgMemoryStore
    from navi_desktop.memory.pg.free_space import NOT_OWNER

    setup = await asyncpg.connect(pg_dsn)
    try:
        await setup.execute(
            "DO $$ BEGIN CREATE ROLE carol_laptop LOGIN; EXCEPTION WHEN duplicate_object"
            " THEN NULL; END $$"
        )
    finally:
        await setup.close()
    async with await _pg_store(pg_dsn):
        pass  # the schema exists, made by the owner
    dsn = as_role(pg_dsn, "carol_laptop")
    async with await PgMemoryStore.open(dsn, profile_name()) as store:
        fact = (await store.add_memory("4921", key="pin")).memory
        report = await store.forget(fact.id)
        assert report.forgotten == [fact.id] and report.scrub_pending == NOT_OWNER
        (pending,) = await store.pending_scrubs()
        assert pending["ids"] == [fact.id] and pending["reason"] == NOT_OWNER
        assert await store.retry_scrubs() == []
        await store.optimize()  # left to autovacuum, no error
        owner = r"only the owner of Navi's tables \(role \w+\) or a superuser may compact"
        with pytest.raises(Exception, match=owner):
            await store.vacuum(full=True)


async def test_delete_session_and_drop_last_reply(any_store):
    await any_store.create_session("plans", session_id="s1")
    await any_store.create_session(session_id="s2")
    asked = await any_store.save_message("s1", "user", "plan a trip to Kyoto")
    await any_store.save_message("s1", "assistant", "Kyoto in spring is lovely")
    await any_store.save_message("s1", "tool", '{"weather": "sunny"}', name="weather")
    await any_store.save_message("s2", "user", "Kyoto again")
    learned = (await any_store.add_memory("Kyoto", key="trip", session_id="s1")).memory
    await any_store.mark_processed("s1", (await any_store.messages("s1"))[-1].id)

    kept = await any_store.drop_last_reply("s1")
    assert kept.id == asked.id and kept.content == "plan a trip to Kyoto"
    assert [m.id for m in await any_store.messages("s1")] == [asked.id]
    assert (await any_store.get_session("s1")).processed_upto == asked.id
    assert await any_store.search("lovely spring", kinds=["message"]) == []
    with pytest.raises(InvalidInput, match="no message to answer again"):
        await any_store.drop_last_reply(await _empty(any_store))
    with pytest.raises(NotFound):
        await any_store.drop_last_reply("nope")

    assert await any_store.delete_session("s1") == 1
    with pytest.raises(NotFound):
        await any_store.get_session("s1")
    assert (await any_store.get(learned.id)).session_id is None  # the memory stays, unlinked
    assert [m.message.session_id for m in await any_store.search("Kyoto", kinds=["message"])] == [
        "s2"
    ]
    with pytest.raises(InvalidInput, match="no session with id 'nope'"):
        await any_store.delete_session("nope")


async def _empty(store) -> str:
    await store.create_session(session_id="quiet")
    return "quiet"


async def test_export_session_and_pending_status(any_store):
    await any_store.create_session("Kyoto trip", session_id="s1", at="2025-03-01T09:30:00Z")
    await any_store.save_message("s1", "user", "plan it", at="2025-03-01T09:31:00Z")
    await any_store.save_message("s1", "tool", "sunny", name="weather", at="2025-03-01T09:32:00Z")
    await any_store.save_message("s1", "assistant", "Done.", at="2025-03-01T09:33:00Z")
    assert await any_store.export_session("s1") == "\n".join(
        [
            "# Kyoto trip",
            "",
            "Started 2025-03-01T09:30Z.",
            "",
            "**User** · 09:31",
            "",
            "plan it",
            "",
            "**Tool result (weather)**",
            "",
            "```",
            "sunny",
            "```",
            "",
            "**Assistant** · 09:33",
            "",
            "Done.",
            "",
        ]
    )
    with pytest.raises(NotFound):
        await any_store.export_session("nope")

    # s1 waits to be processed unless it is still going (open, its inactivity timer running).
    assert await any_store.pending_status() == (1, None)
    assert await any_store.pending_status(["s1"]) == (0, None)
    await any_store.create_session(session_id="s2")
    await any_store.save_message("s2", "user", "hi")
    await any_store.mark_pending("s1", "model unreachable")
    await any_store.mark_pending("s2", "model too slow")
    count, reason = await any_store.pending_status()
    assert count == 2 and reason == "model too slow"


async def test_forgetting_an_episode_says_its_conversation_stays(any_store):
    """An episode's words are the model's own: they match nothing in the conversation it sums
    up, which a forget leaves. The preview says so, and where (until it is deleted)."""
    await any_store.create_session("Moving to Lisbon", session_id="s1")
    for text in ("we may move to Lisbon", "the flat is near the river", "in spring"):
        await any_store.save_message("s1", "user", text)
    await any_store.create_session(session_id="s2")
    await any_store.save_message("s2", "user", "just   one")
    episode = (
        await any_store.add_memory("Planned a move abroad.", kind="episode", session_id="s1")
    ).memory
    untitled = (
        await any_store.add_memory("Said one thing.", kind="episode", session_id="s2")
    ).memory
    fact = (await any_store.add_memory("Lisbon", key="next city", session_id="s1")).memory
    await any_store.create_session(session_id="s3")
    await any_store.save_message("s3", "user", "word " * 30)
    long = (await any_store.add_memory("Said much.", kind="episode", session_id="s3")).memory
    await any_store.create_session(session_id="s4")  # the assistant spoke first
    await any_store.save_message("s4", "assistant", "Welcome back!")
    await any_store.save_message("s4", "user", "I like tea")
    greeted = (await any_store.add_memory("Likes tea.", kind="episode", session_id="s4")).memory

    preview = await any_store.forget_preview(episode.id)
    assert preview.everywhere == []  # its text is nowhere else
    assert preview.kept == (
        "The conversation it sums up stays: \u201cMoving to Lisbon\u201d, 3 messages."
        " Delete that session to remove it too."
    )
    said_once = (await any_store.forget_preview(untitled.id)).kept
    assert "stays: the session that starts \u201cjust one\u201d, 1 message." in said_once
    said_much = (await any_store.forget_preview(long.id)).kept
    assert f"starts \u201c{'word ' * 11}word\u2026\u201d, 1 message." in said_much  # 60 chars
    said_after = (await any_store.forget_preview(greeted.id)).kept  # as the sessions list
    assert "stays: the session that starts \u201cI like tea\u201d, 2 messages." in said_after
    learned = (await any_store.forget_preview(fact.id)).kept  # its words go, the talk stays
    assert learned.startswith("Learned in \u201cMoving to Lisbon\u201d, 3 messages: other")
    await any_store.forget(episode.id)
    assert len(await any_store.messages("s1")) == 3  # as the preview said
    await any_store.delete_session("s2")
    assert (await any_store.forget_preview(untitled.id)).kept is None


async def test_forget_preview_and_needles_change_nothing(any_store):
    await any_store.create_session("About Bob", session_id="s1")
    said = [
        "Bob is my brother",
        "I saw Bob today",
        "BOB again",
        "\uff22\uff4f\uff42 at noon",
        "nobody",
    ]
    for text in said:  # any case, and compatibility forms (fullwidth letters) match too
        await any_store.save_message("s1", "user", text)
    old = (
        await any_store.add_memory(
            "Bob", key="brother name", evidence="my brother is called Bob Smith"
        )
    ).memory
    new = (await any_store.add_memory("Robert", key="brother name")).memory
    twin = (await any_store.add_memory("Bob", key="cousin name")).memory
    await any_store.add_memories([NewMemory("met Bob Smith at work", key="colleague")])

    preview = await any_store.forget_preview(new.id)
    assert preview.memory_id == new.id and preview.versions == [old.id]
    assert sorted(preview.needles) == ["bob", "my brother is called bob smith", "robert"]
    assert preview.broad is None  # "Robert": neither short nor common
    assert preview.everywhere == [
        "4 messages in 1 session",
        "1 session title",
        "1 other memory (redacted)",
        f"1 memory with the same value (#{twin.id}), forgotten too",
        "1 history row of other memories",
        "2 entity names",
    ]
    assert preview.evidence == []
    assert preview.counts["messages"] == 4 and len(preview.samples) == 5
    assert sorted(await any_store.forget_needles(new.id)) == sorted(preview.needles)
    assert await any_store.forget_needles(new.id, "evidence") == ["my brother is called bob smith"]
    with pytest.raises(InvalidInput, match="scope must be one of"):
        await any_store.forget_needles(new.id, "somewhere")
    with pytest.raises(NotFound):
        await any_store.forget_preview(10**9)
    # nothing changed
    assert (await any_store.get(twin.id)).value == "Bob"
    assert [m.content for m in await any_store.messages("s1")] == said
