"""The session-end seam end to end: real OllamaBackend against the fake Ollama on loopback, a real
memory file, the extraction model's JSON answers scripted in the order they are asked for."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from navi_desktop.llm import OllamaUnreachable
from navi_desktop.memory.clock import now_iso, parse_iso
from navi_desktop.memory.facts import AWAITING_REPEAT, NewMemory
from navi_desktop.memory.sessions import MAX_ACTIVE_RULES, SessionWrite
from navi_desktop.memory.store import MemoryStore
from navi_desktop.pipeline.extraction import EXTRACTION_SCHEMA, MERGE_SCHEMA, PROFILE_SCHEMA
from navi_desktop.pipeline.session_end import EndSettings, end_session
from navi_desktop.pipeline.transcript import TOOL_RESULT_LIMIT, transcript_lines
from tests.fake_ollama import Reply
from tests.pipeline_helpers import (
    MODEL,
    SETTINGS,
    chat_bodies,
    extraction,
    fact,
    facts_by_key,
    learn,
    make_backend,
    memory_rows,
    merged,
    new_session,
    profile,
    prompt_of,
    rule,
    say,
)

# -- 1. a conversation becomes memory ---------------------------------------------------------


async def test_conversation_becomes_facts_rule_summary_and_profile(store, llm, fake):
    session = await store.create_session("intro")
    tool_output = "commit 1a2b3c Author: Sam <sam@example.org>\n" + "x" * 2000 + "TAIL-MARKER"
    user1 = await store.save_message(
        session.id, "user", "Hi! I live in Lyon and I mostly code in Rust these days."
    )
    await store.save_message(
        session.id,
        "assistant",
        "Nice! Let me look at your repository.",
        meta={"tool_calls": [{"name": "git_log", "arguments": {"repo": "navi", "limit": 3}}]},
    )
    await store.save_message(session.id, "tool", tool_output, name="git_log")
    user2 = await store.save_message(session.id, "user", "Please answer in French from now on.")
    last = await store.save_message(session.id, "assistant", "D'accord, je réponds en français.")

    fake.script(
        extraction(
            [
                fact("home city", "Lyon", "I live in Lyon", category="profile"),
                fact("main language", "Rust", "I mostly code in Rust", category="technical"),
            ],
            [rule("Answer in French", "Please answer in French from now on")],
            "The user introduced themselves and asked for answers in French.",
        ),
        profile("Lives in Lyon and writes Rust."),
    )
    report = await end_session(store, llm, session.id, SETTINGS)

    assert report.status == "processed", report
    bodies = chat_bodies(fake)
    assert report.llm_calls == len(bodies) == 2  # extraction + profile: at most 3 in one chunk
    assert report.profile_updated

    ask = bodies[0]
    assert ask["model"] == MODEL
    assert ask["format"] == EXTRACTION_SCHEMA
    assert ask["stream"] is False
    transcript = prompt_of(ask)
    assert "User: Hi! I live in Lyon and I mostly code in Rust these days." in transcript
    assert "Assistant: Nice! Let me look at your repository." in transcript
    assert '[Tool call] git_log({"repo": "navi", "limit": 3})' in transcript
    assert "[Tool result] git_log: commit 1a2b3c Author: Sam" in transcript
    assert f"… [{len(tool_output) - TOOL_RESULT_LIMIT} more]" in transcript
    assert "TAIL-MARKER" not in transcript  # tool results are truncated
    assert "User: Please answer in French from now on." in transcript
    assert bodies[1]["format"] == PROFILE_SCHEMA
    assert "home city: Lyon" in prompt_of(bodies[1])

    city = (await facts_by_key(store, "home city"))[0]
    assert city["value"] == "Lyon"
    assert city["status"] == "active"
    assert city["evidence"] == "I live in Lyon"
    assert city["session_id"] == session.id
    assert city["message_from"] == city["message_to"] == user1.id
    assert city["category"] == "profile"
    assert city["source"] == "conversation"
    assert (await facts_by_key(store, "main language"))[0]["status"] == "active"

    rules = await store.active_rules()
    assert [r.value for r in rules] == ["Answer in French"]
    assert rules[0].message_from == user2.id

    summary = await store.latest_summary()
    assert summary is not None
    assert summary.value == "The user introduced themselves and asked for answers in French."
    assert summary.session_id == session.id
    assert (summary.message_from, summary.message_to) == (user1.id, last.id)
    assert report.summary_id == summary.id

    assert await store.profile_summary() == ("Lives in Lyon and writes Rust.", False)
    state = await store.get_session(session.id)
    assert (state.state, state.processed_upto, state.pending_reason) == ("ended", last.id, None)

    # Searchable as soon as the session ended.
    hits = await store.search("Lyon", kinds=["fact"])
    assert [h.id for h in hits] == [city["id"]]


# -- 2. reconciliation: supersede, strengthen -------------------------------------------------


async def test_contradiction_in_a_later_session_supersedes(store, llm, fake):
    _, first = await learn(
        store,
        llm,
        fake,
        [("user", "I live in Lyon.")],
        extraction([fact("home city", "Lyon", "I live in Lyon")]),
        profile("Lives in Lyon."),
    )
    old_id = first.learned["added"][0]
    _, second = await learn(
        store,
        llm,
        fake,
        [("user", "Big news: I moved to Berlin last month.")],
        extraction([fact("home city", "Berlin", "I moved to Berlin last month")]),
        profile("Lives in Berlin."),
    )
    assert second.status == "processed"
    new_id = second.learned["superseded"][0]
    old, new = await store.get(old_id), await store.get(new_id)
    assert (old.status, old.superseded_by) == ("superseded", new_id)
    assert old.valid_to is not None
    assert (new.status, new.value, new.valid_to) == ("active", "Berlin", None)
    assert [v.id for v in await store.versions(new_id)] == [old_id]
    assert [h.memory.value for h in await store.search("home city", kinds=["fact"])] == ["Berlin"]
    assert (await store.profile_summary())[0] == "Lives in Berlin."


async def test_repeat_strengthens_without_a_new_row(store, llm, fake):
    _, first = await learn(
        store,
        llm,
        fake,
        [("user", "I live in Lyon.")],
        extraction([fact("home city", "Lyon", "I live in Lyon")]),
        profile("Lives in Lyon."),
    )
    before = len(await memory_rows(store))
    calls = len(chat_bodies(fake))
    _, again = await learn(
        store,
        llm,
        fake,
        [("user", "Lyon is lovely, I live in Lyon after all.")],
        extraction([fact("home city", "Lyon", "I live in Lyon")], summary=""),
    )
    assert again.learned == {"strengthened": first.learned["added"]}
    rows = await facts_by_key(store, "home city")
    assert len(rows) == 1
    assert rows[0]["mentions"] == 2
    assert len(await memory_rows(store)) == before  # no summary given, no new row at all
    assert len(chat_bodies(fake)) == calls + 1  # nothing changed: no profile rewrite


async def test_near_duplicate_wording_strengthens(store, llm, fake):
    habit = "drinks a double espresso with oat milk every morning before work"
    _, first = await learn(
        store,
        llm,
        fake,
        [("user", "I always have a double espresso with oat milk every morning.")],
        extraction([fact("morning coffee", habit, "a double espresso with oat milk")]),
        profile("Coffee person."),
    )
    reworded = "drinks a double espresso with oat milk every single morning before work"
    _, second = await learn(
        store,
        llm,
        fake,
        [("user", "Yes, a double espresso with oat milk, every single morning.")],
        # A different key on purpose: the duplicate is found by its text, not its key.
        extraction([fact("coffee habit", reworded, "every single morning")]),
    )
    assert second.learned == {"strengthened": first.learned["added"]}
    facts = [r for r in await memory_rows(store) if r["kind"] == "fact"]
    assert len(facts) == 1
    assert (facts[0]["value"], facts[0]["mentions"]) == (habit, 2)


async def test_different_value_below_similarity_is_added(store, llm, fake):
    await learn(
        store,
        llm,
        fake,
        [("user", "My favourite editor is Helix.")],
        extraction([fact("favourite editor", "Helix", "My favourite editor is Helix")]),
        profile("Uses Helix."),
    )
    _, second = await learn(
        store,
        llm,
        fake,
        [("user", "I play the cello in an amateur orchestra.")],
        extraction([fact("instrument", "cello", "I play the cello")]),
        profile("Uses Helix, plays cello."),
    )
    assert list(second.learned) == ["added"]
    assert len([r for r in await memory_rows(store) if r["kind"] == "fact"]) == 2


# -- 3. the write policy ----------------------------------------------------------------------


async def test_sensitive_facts_are_held_and_stay_held_after_reopening(tmp_path, llm, fake):
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        _, report = await learn(
            store,
            llm,
            fake,
            [
                ("user", "I have type 1 diabetes, so no sugary recipes please."),
                ("user", "My partner Alex and I are getting married in June."),
                ("user", "My salary is 85k a year, can I afford a flat?"),
            ],
            extraction(
                [
                    fact(
                        "condition", "type 1 diabetes", "I have type 1 diabetes", category="health"
                    ),
                    fact(
                        "partner",
                        "Alex",
                        "My partner Alex",
                        category="relationships",
                    ),
                    fact("salary", "85k a year", "My salary is 85k a year", category="profile"),
                ]
            ),
        )
        assert report.learned.keys() == {"held"}
        assert len(chat_bodies(fake)) == 1  # nothing became active: no profile rewrite
        assert await store.search("diabetes", kinds=["fact"]) == []  # held is not current

    async with await MemoryStore.open(path) as store:
        held, total = await store.list_memories(kind="fact", status="held")
        assert total == 3
        for m in held:
            assert m.review_reason and m.review_reason.startswith("sensitive")
        assert await store.list_memories(kind="fact") == ([], 0)


async def test_explicit_remember_commits_even_when_sensitive(store, llm, fake):
    _, report = await learn(
        store,
        llm,
        fake,
        [("user", "Remember that my bank is Crédit Mutuel, I always forget which.")],
        extraction(
            [
                fact(
                    "bank",
                    "Crédit Mutuel",
                    "my bank is Crédit Mutuel",
                    category="other",
                    source="user_explicit",
                    confidence=0.4,  # even a low confidence: the user asked
                )
            ]
        ),
        profile("Banks with Crédit Mutuel."),
    )
    row = (await facts_by_key(store, "bank"))[0]
    assert (row["status"], row["review_reason"]) == ("active", None)
    assert report.learned == {"added": [row["id"]]}


async def test_low_confidence_is_held_for_review(store, llm, fake):
    await learn(
        store,
        llm,
        fake,
        [("user", "I might try bouldering at some point.")],
        extraction(
            [fact("hobby", "bouldering", "I might try bouldering", confidence=0.3)],
        ),
    )
    row = (await facts_by_key(store, "hobby"))[0]
    assert row["status"] == "held"
    assert row["review_reason"].startswith("low confidence")


async def test_uncertain_fact_waits_for_a_repetition_then_commits(store, llm, fake):
    _, first = await learn(
        store,
        llm,
        fake,
        [("user", "I think I prefer tabs over spaces.")],
        extraction([fact("indentation", "tabs", "I prefer tabs over spaces", confidence=0.6)]),
    )
    row = (await facts_by_key(store, "indentation"))[0]
    assert first.learned == {"held": [row["id"]]}
    assert (row["status"], row["review_reason"]) == ("held", AWAITING_REPEAT)
    assert await store.search("tabs", kinds=["fact"]) == []

    _, second = await learn(
        store,
        llm,
        fake,
        [("user", "As I said, I prefer tabs over spaces, always.")],
        extraction([fact("indentation", "tabs", "I prefer tabs over spaces", confidence=0.65)]),
        profile("Prefers tabs."),
    )
    rows = await facts_by_key(store, "indentation")
    assert len(rows) == 1
    assert (rows[0]["id"], rows[0]["status"], rows[0]["review_reason"]) == (
        row["id"],
        "active",
        None,
    )
    assert rows[0]["mentions"] == 2
    assert second.learned.get("promoted") == [row["id"]]
    # A fact that became active changes the profile: it is rewritten.
    assert second.profile_updated
    assert await store.profile_summary() == ("Prefers tabs.", False)
    assert [h.id for h in await store.search("tabs", kinds=["fact"])] == [row["id"]]


async def test_uncertain_new_value_replaces_the_old_one_when_repeated(store, llm, fake):
    _, first = await learn(
        store,
        llm,
        fake,
        [("user", "I live in Lyon.")],
        extraction([fact("home city", "Lyon", "I live in Lyon")]),
        profile("Lives in Lyon."),
    )
    lyon = first.learned["added"][0]
    _, second = await learn(
        store,
        llm,
        fake,
        [("user", "I think I moved to Berlin, sort of.")],
        extraction([fact("home city", "Berlin", "I moved to Berlin", confidence=0.6)]),
    )
    berlin = second.learned["held"][0]
    assert (await store.get(lyon)).status == "active"  # not replaced by a guess

    _, third = await learn(
        store,
        llm,
        fake,
        [("user", "Yes, I moved to Berlin in May.")],
        extraction([fact("home city", "Berlin", "I moved to Berlin", confidence=0.6)]),
        profile("Lives in Berlin."),
    )
    assert third.learned["promoted"] == [berlin]
    rows = await facts_by_key(store, "home city")
    assert [(r["id"], r["status"]) for r in rows] == [(lyon, "superseded"), (berlin, "active")]
    assert rows[0]["superseded_by"] == berlin and rows[0]["valid_to"] is not None
    assert [h.memory.value for h in await store.search("home city", kinds=["fact"])] == ["Berlin"]
    assert await store.profile_summary() == ("Lives in Berlin.", False)


# -- 4. no hallucinated or forgotten memories -------------------------------------------------


async def test_hallucinated_evidence_is_dropped(store, llm, fake):
    _, report = await learn(
        store,
        llm,
        fake,
        [("user", "I live in Lyon."), ("assistant", "Lovely city.")],
        extraction(
            [
                fact("home city", "Lyon", "I live in Lyon"),
                fact("pets", "three cats", "I have three cats"),
            ],
            [rule("Never use emojis", "no emojis ever")],
        ),
        profile("Lives in Lyon."),
    )
    values = {r["value"] for r in await memory_rows(store)}
    assert "Lyon" in values
    assert "three cats" not in values
    assert "Never use emojis" not in values
    assert any(d.startswith("pets: three cats") and "evidence" in d for d in report.dropped)
    assert any(d.startswith("Never use emojis") for d in report.dropped)


async def test_forgotten_fact_is_not_extracted_again(store, llm, fake):
    turns = [("user", "I work at Initech as a backend developer.")]
    answer = [fact("employer", "Initech", "I work at Initech", category="projects")]
    _, first = await learn(store, llm, fake, turns, extraction(answer), profile("Initech."))
    fact_id = first.learned["added"][0]
    await store.forget(fact_id)
    assert await store.is_forgotten("Initech", subject="user", key="employer")

    _, again = await learn(store, llm, fake, turns, extraction(answer))
    assert again.status == "processed"
    assert "added" not in again.learned
    assert any("forget" in d for d in again.dropped)
    assert await facts_by_key(store, "employer") == []
    assert await store.search("Initech", kinds=["fact"]) == []


# -- 5. idempotency and the watermark ---------------------------------------------------------


async def test_second_end_does_nothing_and_makes_no_call(store, llm, fake):
    sid, first = await learn(
        store,
        llm,
        fake,
        [("user", "I live in Lyon.")],
        extraction([fact("home city", "Lyon", "I live in Lyon")], summary="About Lyon."),
        profile("Lives in Lyon."),
    )
    assert first.status == "processed"
    rows, requests = await memory_rows(store), len(fake.requests)
    again = await end_session(store, llm, sid, SETTINGS)
    assert (again.status, again.llm_calls) == ("nothing", 0)
    assert len(fake.requests) == requests
    assert await memory_rows(store) == rows


async def test_continued_session_is_processed_from_the_watermark(store, llm, fake):
    sid, first = await learn(
        store,
        llm,
        fake,
        [("user", "I live in Lyon."), ("assistant", "Noted.")],
        extraction([fact("home city", "Lyon", "I live in Lyon")], summary="About Lyon."),
        profile("Lives in Lyon."),
    )
    assert first.status == "processed"
    assert (await store.get_session(sid)).state == "ended"
    await say(store, sid, ("user", "Also, I play the cello."), ("assistant", "Nice!"))
    assert (await store.get_session(sid)).state == "open"

    fake.script(
        extraction([fact("instrument", "cello", "I play the cello")], summary="About the cello."),
        profile("Lives in Lyon, plays cello."),
    )
    before = len(chat_bodies(fake))
    second = await end_session(store, llm, sid, SETTINGS)
    assert second.status == "processed"
    ask = prompt_of(chat_bodies(fake)[before])
    assert "User: Also, I play the cello." in ask
    assert "Assistant: Nice!" in ask
    assert "Lyon" not in ask and "Noted." not in ask
    assert (await facts_by_key(store, "instrument"))[0]["status"] == "active"
    episodes, _ = await store.list_memories(kind="episode", sort="id", descending=False)
    assert [e.value for e in episodes] == ["About Lyon.", "About the cello."]


# -- 6. long sessions -------------------------------------------------------------------------


def whole_line_chunks(lines, limit):
    """The expected chunks: consecutive lines, each chunk under ``limit`` characters."""
    out, size = [[]], 0
    for line in lines:
        if out[-1] and size + len(line[1]) + 1 > limit:
            out, size = [*out, []], 0
        out[-1].append(line)
        size += len(line[1]) + 1
    return out


async def test_long_session_is_chunked_with_nothing_dropped(store, llm, fake):
    settings = EndSettings(model=MODEL, chunk_chars=200)
    turns = [
        ("user" if i % 2 == 0 else "assistant", f"marker-{i:02d} " + "lorem ipsum " * 6)
        for i in range(12)
    ]
    turns[5] = ("assistant", "marker-05 by the way, you said you keep bees on your roof.")
    turns[6] = ("user", "marker-06 Yes, I keep bees on the roof of my building.")
    sid = await new_session(store, *turns)
    expected = len(whole_line_chunks(transcript_lines(await store.messages(sid)), 200))
    assert expected >= 4
    replies = [extraction(summary=f"Summary of part {n}.") for n in range(expected)]
    middle = next(
        n
        for n, chunk in enumerate(
            whole_line_chunks(transcript_lines(await store.messages(sid)), 200)
        )
        if any("marker-06" in text for _, text in chunk)
    )
    assert 0 < middle < expected - 1
    replies[middle] = extraction(
        [fact("hobby", "beekeeping", "I keep bees on the roof", category="other")],
        summary=f"Summary of part {middle}.",
    )
    fake.script(*replies, merged("One long talk about bees."), profile("Keeps bees."))

    report = await end_session(store, llm, sid, settings)

    assert report.status == "processed"
    bodies = chat_bodies(fake)
    assert report.llm_calls == len(bodies) == expected + 2
    asks = bodies[:expected]
    assert all(b["format"] == EXTRACTION_SCHEMA for b in asks)
    for i in range(12):
        holders = [n for n, b in enumerate(asks) if f"marker-{i:02d}" in prompt_of(b)]
        assert len(holders) == 1, (i, holders)  # every message in exactly one request
    assert bodies[expected]["format"] == MERGE_SCHEMA
    merge_text = prompt_of(bodies[expected])
    assert all(f"Summary of part {n}." in merge_text for n in range(expected))
    assert bodies[expected + 1]["format"] == PROFILE_SCHEMA
    bees = (await facts_by_key(store, "hobby"))[0]
    assert bees["status"] == "active"
    messages = await store.messages(sid)
    assert bees["message_from"] == messages[6].id
    assert (await store.latest_summary()).value == "One long talk about bees."


# -- 7. failures leave the session pending, memories untouched ---------------------------------

GOOD = [fact("home city", "Lyon", "I live in Lyon")]
VALID = json.dumps({"facts": GOOD, "rules": [], "summary": "Lyon."})


def _bad_fact(**change):
    return json.dumps({"facts": [{**GOOD[0], **change}], "rules": [], "summary": "x"})


FAILURES = {
    "invalid json": (Reply("not json"), "not valid JSON"),
    "confidence not a number": (Reply(_bad_fact(confidence=[0.9])), "confidence is not a number"),
    "facts not a list": (
        Reply(json.dumps({"facts": "Lyon", "rules": [], "summary": "x"})),
        '"facts" and "rules" lists',
    ),
    "empty key": (Reply(_bad_fact(key="  ")), "empty attribute"),
    "truncated": (Reply(VALID[: len(VALID) // 2]), "not valid JSON"),
    "truncated at the token limit": (
        Reply(VALID[: len(VALID) // 2], done_reason="length"),
        "cut off",
    ),
    "server error": (Reply(status=500, error="out of memory"), "out of memory"),
}


async def _seed(store):
    """Memory that exists before the failing session: it must come out unchanged."""
    await store.add_memory("Helix", key="favourite editor", category="preferences")
    await store.add_memory("Keep answers short", kind="rule")
    await store.set_profile_summary("Uses Helix.")


async def _check_pending(store, sid, reason_part, rows, monkeypatch):
    session = await store.get_session(sid)
    assert session.state == "pending"
    assert session.processed_upto == 0
    assert reason_part in session.pending_reason
    assert await store.pending_status() == (1, session.pending_reason)
    assert await store.sessions_to_process() == []  # not due yet: backoff
    later = (parse_iso(now_iso()) + timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    with monkeypatch.context() as m:
        m.setattr("navi_desktop.memory.sessions.now_iso", lambda: later)
        assert [s.id for s in await store.sessions_to_process()] == [sid]
    assert await memory_rows(store) == rows
    assert await store.profile_summary() == ("Uses Helix.", False)
    assert len(await store.messages(sid)) == 2  # the transcript is never lost


async def _retry_succeeds(store, llm, fake, sid):
    fake.script(Reply(VALID), profile("Uses Helix, lives in Lyon."))
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "processed", report
    assert (await facts_by_key(store, "home city"))[0]["status"] == "active"
    assert await store.pending_status() == (0, None)
    assert (await store.get_session(sid)).state == "ended"
    assert await store.sessions_to_process(include_open=True) == []


@pytest.mark.parametrize("case", list(FAILURES))
async def test_bad_model_output_leaves_session_pending(store, llm, fake, monkeypatch, case):
    reply, reason_part = FAILURES[case]
    await _seed(store)
    sid = await new_session(store, ("user", "I live in Lyon."), ("assistant", "Nice."))
    rows = await memory_rows(store)
    fake.script(reply)
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "pending"
    assert reason_part in report.reason
    await _check_pending(store, sid, reason_part, rows, monkeypatch)
    await _retry_succeeds(store, llm, fake, sid)


async def test_ollama_down_leaves_session_pending(store, llm, fake, monkeypatch):
    await _seed(store)
    sid = await new_session(store, ("user", "I live in Lyon."), ("assistant", "Nice."))
    rows = await memory_rows(store)
    await fake.go_down()
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "pending"
    assert report.reason == str(OllamaUnreachable(llm.host, "connection refused"))
    await _check_pending(store, sid, "cannot reach Ollama", rows, monkeypatch)
    await fake.come_up()
    await _retry_succeeds(store, llm, fake, sid)


async def test_timeout_leaves_session_pending(store, fake, monkeypatch):
    await _seed(store)
    sid = await new_session(store, ("user", "I live in Lyon."), ("assistant", "Nice."))
    rows = await memory_rows(store)
    fake.script(Reply(VALID, delay=5))
    async with make_backend(fake, timeout=0.3) as llm:
        report = await end_session(store, llm, sid, SETTINGS)
        assert report.status == "pending"
        assert "timed out after 0.3 s" in report.reason
        await _check_pending(store, sid, "timed out", rows, monkeypatch)
        await _retry_succeeds(store, llm, fake, sid)


async def test_failure_in_a_later_chunk_keeps_the_earlier_ones(store, llm, fake):
    await _seed(store)
    sid = await new_session(
        store, ("user", "I live in Lyon. " + "a" * 150), ("assistant", "Nice. " + "b" * 150)
    )
    first, second = await store.messages(sid)
    fake.script(Reply(VALID), Reply("{"))
    report = await end_session(store, llm, sid, EndSettings(model=MODEL, chunk_chars=200))
    assert (report.status, report.llm_calls) == ("pending", 2)
    assert "not valid JSON" in report.reason
    session = await store.get_session(sid)
    assert (session.state, session.processed_upto) == ("pending", first.id)
    assert (await facts_by_key(store, "home city"))[0]["status"] == "active"
    # The retry asks about the rest only, in smaller chunks (a different request).
    fake.default_reply = extraction(summary="More chat.")
    before = len(chat_bodies(fake))
    again = await end_session(store, llm, sid, EndSettings(model=MODEL, chunk_chars=200))
    assert again.status == "processed"
    bodies = chat_bodies(fake)[before:]
    asks = [prompt_of(b) for b in bodies if b["format"] == EXTRACTION_SCHEMA]
    assert len(asks) == again.chunks > 1
    assert "Nice." in asks[0] and not any("Lyon" in ask for ask in asks)
    assert (await store.get_session(sid)).processed_upto == second.id


async def test_failed_profile_rewrite_keeps_the_session_processed(store, llm, fake):
    _, report = await learn(
        store,
        llm,
        fake,
        [("user", "I live in Lyon.")],
        Reply(VALID),
        Reply("not json"),
    )
    assert report.status == "processed"
    assert not report.profile_updated
    assert (await facts_by_key(store, "home city"))[0]["status"] == "active"
    assert await store.profile_summary() == (None, True)  # stale: retried later
    assert await store.pending_status() == (0, None)


# -- 8. the rule cap --------------------------------------------------------------------------

COLOURS = "red orange yellow green blue indigo violet black white grey".split()
THINGS = "tables lists headings links quotes dates prices names".split()


def _rule_text(n: int) -> str:
    return f"Write {THINGS[n % 8]} in {COLOURS[n % 10]} style number {n}"


async def test_rules_are_capped_and_the_oldest_archived(store, llm, fake):
    seeded = []
    for n in range(MAX_ACTIVE_RULES - 2):
        sid = await new_session(store, ("user", _rule_text(n)))
        commit = await store.commit_session(
            sid,
            (await store.messages(sid))[-1].id,
            [
                SessionWrite(
                    "add", NewMemory(value=_rule_text(n), kind="rule", source="conversation")
                )
            ],
            None,
        )
        seeded += commit.ids["added"]

    new = [_rule_text(n) for n in range(MAX_ACTIVE_RULES - 2, MAX_ACTIVE_RULES + 2)]
    _, report = await learn(
        store,
        llm,
        fake,
        [("user", f"From now on: {text}.") for text in new],
        extraction(rules=[rule(text, text) for text in new]),
    )
    assert len(report.learned["added"]) == 4

    active = await store.active_rules()
    assert len(active) == MAX_ACTIVE_RULES
    archived, total = await store.list_memories(kind="rule", status="archived", sort="id")
    assert total == 2
    assert sorted(m.id for m in archived) == seeded[:2]  # the oldest two, kept not deleted
    assert {m.value for m in active} == {_rule_text(n) for n in range(2, MAX_ACTIVE_RULES + 2)}
    history = await store.history(seeded[0])
    assert history[-1].action == "archive"
    assert history[-1].new == {"status": "archived", "reason": "rule limit"}
