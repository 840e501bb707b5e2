"""Memory with the small local models people run: what they do wrong (endless arrays, empty
strings, wrong types, prose around JSON, answers cut at ``num_predict``, repeated items,
prompts cut from the front when longer than ``num_ctx``, invented summaries) must not cost
the good candidates, write garbage, or hold up a chat reply. The fake Ollama plays each."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from navi_desktop.daemon.chat import run_turn
from navi_desktop.llm.budget import unbounded_paths
from navi_desktop.pipeline.context import ContextSettings
from navi_desktop.pipeline.extraction import (
    EXTRACTION_PROMPT,
    EXTRACTION_SCHEMA,
    MERGE_SCHEMA,
    PROFILE_SCHEMA,
)
from navi_desktop.pipeline.maintenance import REFLECTION_SCHEMA
from navi_desktop.pipeline.session_end import EndSettings, end_session
from tests.daemon_support import Peer, make_service
from tests.fake_ollama import FakeModel, FakeOllama, Reply, endless
from tests.pipeline_helpers import (
    MODEL,
    SETTINGS,
    chat_bodies,
    extraction,
    fact,
    facts_by_key,
    make_backend,
    memory_rows,
    merged,
    new_session,
    profile,
    prompt_of,
    rule,
)

SMALL = FakeModel(MODEL, context_length=8192)  # what a 135M-3B model reports
LYON = fact("home city", "Lyon", "I live in Lyon", category="profile")


@pytest.fixture
async def fake():
    async with FakeOllama([SMALL]) as server:
        yield server


def extraction_bodies(fake):
    return [b for b in chat_bodies(fake) if b.get("format") == EXTRACTION_SCHEMA]


# -- bounded, deterministic requests -----------------------------------------------------------


def test_every_pipeline_schema_is_bounded():
    for schema in (EXTRACTION_SCHEMA, MERGE_SCHEMA, PROFILE_SCHEMA, REFLECTION_SCHEMA):
        assert unbounded_paths(schema) == [], schema


async def test_every_structured_request_is_seeded_and_sized(store, llm, fake):
    long_turns = [("user", f"I live in Lyon. {'More about my day. ' * 300}")] * 3
    sid = await new_session(store, *long_turns)
    fake.default_reply = extraction([LYON], summary="The user lives in Lyon.")
    fake.script()
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "processed" and report.chunks > 1
    formats = [b["format"] for b in chat_bodies(fake)]
    assert MERGE_SCHEMA in formats and PROFILE_SCHEMA in formats
    for request in fake.requests:
        if request.path != "/api/chat":
            continue
        options = request.body["options"]
        assert options["temperature"] <= 0.3 and "seed" in options
        # room for the prompt and the longest answer the schema allows, within the model
        assert request.fit["prompt_tokens"] + options["num_predict"] <= options["num_ctx"]
        assert options["num_ctx"] <= SMALL.context_length
        assert request.fit["cut_tokens"] == request.fit["dropped_messages"] == 0


async def test_an_endless_array_stops_at_the_schema_bound(store, llm, fake):
    sid = await new_session(store, ("user", "I live in Lyon."), ("assistant", "Nice."))
    fake.script(endless(LYON), profile("Lives in Lyon."))
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "processed", report.reason
    assert [r["value"] for r in await facts_by_key(store, "home city")] == ["Lyon"]
    assert sum("repeats an earlier fact" in d for d in report.dropped) == report.offered - 1


async def test_one_malformed_candidate_is_dropped_alone(store, llm, fake):
    sid = await new_session(
        store,
        ("user", "I live in Lyon. I play the cello. My cat is called Miso."),
        ("assistant", "Lovely."),
    )
    answer = {
        "facts": [
            LYON,
            fact("", "piano", "I play the cello"),  # empty attribute
            fact("instrument", "", "I play the cello"),  # empty value
            fact("cat", ["Miso"], "My cat is called Miso"),  # wrong type
            fact("instrument", "cello", "I play the cello", confidence=1597),  # out of range
        ],
        "rules": [{"instruction": 7}],
        "summary": "The user lives in Lyon and plays the cello.",
    }
    fake.script(Reply(json.dumps(answer)), profile("Lives in Lyon, plays the cello."))
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "processed", report.reason
    assert report.offered == 6 and len(report.dropped) == 4
    reasons = " | ".join(report.dropped)
    assert "empty attribute" in reasons and "empty value" in reasons
    assert "value is list, not text" in reasons and "rule #1" in reasons
    assert (await facts_by_key(store, "home city"))[0]["status"] == "active"
    cello = (await facts_by_key(store, "instrument"))[0]
    assert (cello["value"], cello["confidence"]) == ("cello", 1.0)  # clamped


async def test_a_fact_copied_from_a_redacted_transcript_is_dropped(store, llm, fake):
    """A session whose text was forgotten mid-way reads "[forgotten]" there: a small model
    took it for the value ("gate code: [forgotten] please"), which was then kept as a fact."""
    sid = await new_session(
        store, ("user", "I live in Lyon. My gate code is [forgotten] please."), ("assistant", "Ok.")
    )
    answer = {
        "facts": [LYON, fact("gate code", "[forgotten] please", "My gate code is [forgotten]")],
        "rules": [],
        "summary": "The user lives in Lyon.",
    }
    fake.script(Reply(json.dumps(answer)), profile("Lives in Lyon."))
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "processed", report.reason
    assert any("holds [forgotten]" in d for d in report.dropped), report.dropped
    assert await facts_by_key(store, "gate code") == []
    assert [r["value"] for r in await facts_by_key(store, "home city")] == ["Lyon"]


async def test_prose_around_the_json_is_read(store, llm, fake):
    sid = await new_session(store, ("user", "I live in Lyon."))
    body = json.dumps({"facts": [LYON], "rules": [], "summary": ""})
    fake.script(Reply(f"Sure! Here is the JSON you asked for:\n{body}\nHope it helps."))
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "processed", report.reason
    assert (await facts_by_key(store, "home city"))[0]["status"] == "active"


async def test_an_answer_cut_at_num_predict_keeps_its_complete_items(store, llm, fake):
    sid = await new_session(store, ("user", "I live in Lyon and I play the cello."))
    cello = fact("instrument", "cello", "I play the cello")
    cut_one = fact("long", "x" * 400, "I play the cello")
    fake.script(
        Reply(json.dumps({"facts": [LYON, cello, cut_one], "rules": [], "summary": ""})),
        profile("Lives in Lyon."),
    )
    settings = EndSettings(model=MODEL, options={"num_predict": 120})  # ~480 characters
    report = await end_session(store, llm, sid, settings)
    assert report.status == "processed", report.reason
    assert any("cut off" in d for d in report.dropped)
    assert {r["value"] for r in await memory_rows(store) if r["kind"] == "fact"} == {
        "Lyon",
        "cello",
    }


async def test_nothing_usable_leaves_the_session_pending_and_the_retry_changes(store, llm, fake):
    turns = [("user", f"Part {n}: I live in Lyon. " + "filler words here " * 90) for n in range(6)]
    sid = await new_session(store, *turns)
    fake.default_reply = Reply(json.dumps({"facts": [fact("", "", "")], "rules": []}))
    first = await end_session(store, llm, sid, SETTINGS)
    assert first.status == "pending" and "nothing usable" in first.reason
    assert "empty attribute" in first.reason
    asked = extraction_bodies(fake)
    fake.requests.clear()
    fake.default_reply = extraction([LYON])
    second = await end_session(store, llm, sid, SETTINGS)
    assert second.status == "processed"
    retried = extraction_bodies(fake)
    assert len(retried) > len(asked)  # smaller chunks: a different request, not the same one
    assert max(len(prompt_of(b)) for b in retried) < max(len(prompt_of(b)) for b in asked)


# -- prompts that fit ------------------------------------------------------------------------


async def test_a_long_message_is_split_and_no_prompt_is_cut(store, llm, fake):
    giant = "I keep a diary of my garden. " + "The tomatoes grew again today. " * 1200
    sid = await new_session(
        store, ("user", "I live in Lyon."), ("user", giant), ("user", "marker-end")
    )
    fake.default_reply = extraction()
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "processed"
    asks = [r for r in fake.requests if r.path == "/api/chat"]
    assert len(asks) >= 3
    for request in asks:
        assert request.fit["cut_tokens"] == request.fit["dropped_messages"] == 0
    system = [m["content"] for b in extraction_bodies(fake) for m in b["messages"][:1]]
    assert all(text.startswith(EXTRACTION_PROMPT[:40]) for text in system)
    prompts = [prompt_of(b) for b in extraction_bodies(fake)]
    assert sum(p.count("tomatoes") for p in prompts) == 1200  # every word, once
    assert "marker-end" in prompts[-1]


async def capped_turn(store, llm, sid: str, text: str) -> Any:
    """A chat turn with a reply cap of 64 tokens, no tools."""
    return await run_turn(
        store=store,
        backend=llm,
        model=MODEL,
        session_id=sid,
        text=text,
        emit=Peer().notify,
        context=ContextSettings(),
        use_tools=False,
        reply_tokens=64,
    )


async def test_a_chat_reply_is_capped_and_says_so_and_its_history_fits(store, llm, fake):
    sid = await new_session(
        store,
        ("user", "Tell me everything."),
        ("assistant", "Everything: " + "and then some more. " * 2000),
    )
    fake.script(Reply("word " * 300))
    result = await capped_turn(store, llm, sid, "And the short version?")
    assert result.cut and result.to_dict()["cut"]
    (request,) = [r for r in fake.requests if r.path == "/api/chat"]
    assert request.body["options"]["num_predict"] == 64
    assert request.fit["cut_tokens"] == request.fit["dropped_messages"] == 0
    assert (await store.messages(sid))[-1].meta["cut"] is True


async def test_a_server_that_ignores_the_cap_is_cut_by_navi(store, llm, fake, monkeypatch):
    """Not every Ollama-compatible server keeps num_predict: one that streams on past it
    (here 400,000 characters against a 64-token cap) is cut where the cap allows, its
    connection closed, and the reply saved and marked as cut."""
    import tests.fake_ollama as fo
    from navi_desktop.llm.budget import MAX_CHARS_PER_TOKEN

    monkeypatch.setattr(fo, "cap_reply", lambda reply, limit: reply)
    sid = await new_session(store, ("user", "Hello"))
    fake.script(Reply(chunks=["rambling " * 100] * 500, thinking="hmm " * 10, delay=0.002))
    result = await capped_turn(store, llm, sid, "Tell me about yourself.")
    assert result.cut and 0 < len(result.reply) <= 64 * MAX_CHARS_PER_TOKEN
    saved = (await store.messages(sid))[-1]
    assert saved.meta["cut"] is True and saved.content == result.reply
    await fake.wait_for_disconnect()


async def test_the_system_prompt_mentions_memory_only_when_there_is_some(store):
    sid = await new_session(store, ("user", "Hello"))
    from navi_desktop.pipeline.context import build_context

    empty = await build_context(store, user_text="Hi", history=[], session_id=sid, first_turn=True)
    assert "memory" not in empty.messages[0]["content"].lower()
    await store.add_memory("Answer in French", kind="rule")
    full = await build_context(
        store, user_text="Where do I live?", history=[], session_id=sid, first_turn=True
    )
    assert "remember" in full.messages[0]["content"] and "<memory>" in full.messages[0]["content"]


# -- evidence that supports the value --------------------------------------------------------


async def test_evidence_must_be_a_substantial_span_of_the_users_words(store, llm, fake):
    sid = await new_session(
        store,
        ("user", "I have a new baby and my family is visiting. I live in Lyon."),
        ("assistant", "Congratulations! You said your favourite editor is Helix, right?"),
    )
    fake.script(
        extraction(
            [
                fact("homecity", "birthday,", "family"),  # one common word
                fact("favourite editor", "Helix", "your favourite editor is Helix"),  # assistant
                fact("home city", "favourite editor", "I live in Lyon"),  # value not in quote
                fact("job", "lighthouse keeper", "I keep lighthouses running"),  # the example
                LYON,
            ]
        ),
        profile("Lives in Lyon."),
    )
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "processed"
    stored = [(r["key"], r["value"]) for r in await memory_rows(store) if r["kind"] == "fact"]
    assert stored == [("home city", "Lyon")]
    reasons = " | ".join(report.dropped)
    assert "quote too short" in reasons
    assert "assistant's words" in reasons
    assert "value not supported by its quote" in reasons
    assert "not found in the conversation" in reasons


async def test_material_to_work_on_and_questions_are_not_facts(store, llm, fake):
    sid = await new_session(
        store,
        ("user", "Summarise this: the quarterly report shows sales up four percent."),
        ("user", "Is Lyon a good place to live? I use Emacs for everything."),
    )
    fake.script(
        extraction(
            [
                fact("job", "quarterly report", "the quarterly report shows sales up"),
                fact("home city", "Lyon", "Is Lyon a good place to live"),
                fact("editor", "Emacs", "I use Emacs for everything"),
            ]
        ),
        profile("Uses Emacs."),
    )
    report = await end_session(store, llm, sid, SETTINGS)
    stored = [r["value"] for r in await memory_rows(store) if r["kind"] == "fact"]
    assert stored == ["Emacs"]
    reasons = " | ".join(report.dropped)
    assert "material the user asked to work on" in reasons and "from a question" in reasons


# -- summaries and the profile go through the checks -----------------------------------------


async def test_an_invented_summary_is_replaced_by_the_users_own_sentences(store, llm, fake):
    sid = await new_session(
        store,
        ("user", "I'm Tom. I live in Lyon and I restore old bicycles at the weekend."),
        ("assistant", "What a nice hobby."),
    )
    fake.script(
        extraction(
            [fact("home city", "Lyon", "I live in Lyon")],
            summary="In 2014, she was diagnosed with severe epilepsy. NeCML is the command line.",
        ),
        profile("Mike@L.Bass, [city], plays bass in Berlin."),
    )
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "processed"
    summary = await store.latest_summary()
    assert summary is not None
    assert "epilepsy" not in summary.value and "NeCML" not in summary.value
    assert "I live in Lyon and I restore old bicycles" in summary.value
    text, _ = await store.profile_summary()
    assert "Mike" not in text and "Berlin" not in text and "Lyon" in text
    assert any("summary" in n for n in report.notes) and any("profile" in n for n in report.notes)


async def test_a_summary_leaves_out_what_is_held_for_review(store, llm, fake):
    sid = await new_session(
        store, ("user", "I live in Lyon. I am allergic to peanuts."), ("assistant", "Noted.")
    )
    fake.script(
        extraction(
            [LYON, fact("allergy", "peanuts", "I am allergic to peanuts", category="health")],
            summary="The user lives in Lyon. The user is allergic to peanuts.",
        ),
        profile("Lives in Lyon."),
    )
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.learned.get("held")
    assert (await store.latest_summary()).value == "The user lives in Lyon."


async def test_merged_summary_must_come_from_the_parts(store, llm, fake):
    turns = [("user", f"I keep bees on my roof, part {n}. " + "bees " * 300) for n in range(3)]
    sid = await new_session(store, *turns)
    fake.default_reply = extraction(summary="The user keeps bees on the roof.")
    fake.script(
        *[extraction(summary="The user keeps bees on the roof.")] * 2,
        merged("The user, a famous Norwegian astronaut, flew to Mars in 1999."),
    )
    settings = EndSettings(model=MODEL, chunk_chars=2000)
    report = await end_session(store, llm, sid, settings)
    assert report.status == "processed" and report.chunks == 3
    assert "Mars" not in (await store.latest_summary()).value


# -- extraction never gets in the user's way ---------------------------------------------------


async def test_a_chat_reply_is_not_held_up_by_a_session_end(tmp_path):
    async with FakeOllama([SMALL]) as fake:
        fake.serial = True  # one request at a time, as Ollama runs one model

        async def broadcast(topic, method, params):
            pass

        service = make_service(tmp_path, fake.url, broadcast)
        try:
            store = await service.store("me")
            sid = await new_session(store, ("user", "I live in Lyon."), ("assistant", "Nice."))
            # A slow model: the first extraction request never answers by itself.
            fake.script(
                Reply(hang=True), Reply("Hello!"), extraction([LYON]), profile("Lives in Lyon.")
            )
            ending = asyncio.ensure_future(service.end("me", sid, "explicit"))
            while not extraction_bodies(fake):
                await asyncio.sleep(0.01)
            status = await service.status({}, Peer())
            (progress,) = status["extracting"]
            assert (progress["session_id"], progress["chunk"], progress["chunks"]) == (sid, 1, 1)

            result = await asyncio.wait_for(service.chat_send({"text": "Hi"}, Peer()), 10)
            assert result["reply"] == "Hello!"
            report = await asyncio.wait_for(ending, 10)
            assert report.status == "processed"
            assert fake.disconnects >= 1  # the extraction request was called off ...
            kinds = ["format" in b for b in chat_bodies(fake)]
            assert kinds[:3] == [True, False, True]  # ... and sent again after the reply
            assert service.gate.pauses == 1
            assert (await facts_by_key(store, "home city"))[0]["status"] == "active"
        finally:
            await service.shutdown(budget_s=5)


async def test_rules_from_the_user_pass_the_checks(store, llm, fake):
    sid = await new_session(store, ("user", "Please always answer in French from now on."))
    fake.script(extraction(rules=[rule("Answer in French", "always answer in French")]))
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.learned.get("added")
    assert [r.value for r in await store.active_rules()] == ["Answer in French"]


@pytest.fixture
async def llm(fake):
    async with make_backend(fake) as backend:
        yield backend


async def test_a_long_reply_reaches_extraction_shortened(store, llm, fake):
    reply = "Here is everything. " + "blah " * 3000 + "Do you live in Lyon?"
    sid = await new_session(store, ("assistant", reply), ("user", "Yes, I live in Lyon."))
    fake.script(extraction([LYON]), profile("Lives in Lyon."))
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "processed" and report.chunks == 1
    ask = prompt_of(extraction_bodies(fake)[0])
    assert "Here is everything." in ask and "Do you live in Lyon?" in ask
    assert len(ask) < 1500


def test_navi_end_says_what_was_dropped_and_why(tmp_path):
    import os
    import subprocess
    import sys

    from tests.fake_ollama import ThreadedFakeOllama
    from tests.pipeline_helpers import MODELS

    with ThreadedFakeOllama(MODELS) as server:
        home = tmp_path / "h"
        (home / "config").mkdir(parents=True)
        (home / "config" / "config.toml").write_text(
            '[ollama]\nchat_model = "llama3.2"\n[memory]\nembedder = "none"\nprofile = "t"\n'
        )
        env = {**os.environ, "NAVI_HOME": str(home), "OLLAMA_HOST": server.url}

        def navi(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "navi_desktop", *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )

        try:
            server.script(
                Reply("Nice."),
                extraction(
                    [LYON, fact("home city", "Paris", "the capital of France")],
                    summary="The user lives in Lyon.",
                ),
                profile("Lives in Lyon."),
            )
            chat = navi("chat", "I live in Lyon.")
            assert chat.returncode == 0, chat.stderr
            session_id = chat.stderr.strip().split()[-1]
            ended = navi("end", "--session", session_id)
            assert ended.returncode == 0, ended.stderr
            assert "processed — 1 added" in ended.stdout
            assert "dropped 1 of 2:" in ended.stdout
            assert "home city: Paris: evidence quote not found in the conversation" in (
                ended.stdout
            )
        finally:
            navi("daemon", "stop")


async def test_secrets_and_template_debris_are_never_kept(store, llm, fake):
    sid = await new_session(
        store,
        ("user", "My API key for staging is sk-live-93jf82kd0a. I live in Glasgow."),
        ("assistant", "Noted."),
    )
    fake.script(
        extraction(
            [
                fact(
                    "api key", "sk-live-93jf82kd0a", "My API key for staging is sk-live-93jf82kd0a"
                ),
                fact("home city", "Glasgow", "I live in Glasgow"),
            ],
            summary="{{user}}: You live in Glasgow. {assistant},",
        ),
        profile("Lives in Glasgow."),
    )
    report = await end_session(store, llm, sid, SETTINGS)
    assert any("looks like a secret" in d for d in report.dropped)
    values = [r["value"] for r in await memory_rows(store)]
    assert not any("sk-live" in v or "{" in v for v in values), values
    assert (await store.latest_summary()).value == "The user said: “I live in Glasgow.”"


async def test_an_invented_sentence_is_left_out_of_a_grounded_summary(store, llm, fake):
    sid = await new_session(
        store, ("user", "I run a small bakery in Porto with my husband."), ("assistant", "Nice!")
    )
    fake.script(
        extraction(
            summary="The user runs a small bakery in Porto with her husband. "
            "The user loves Ira, her best friend."
        )
    )
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "processed"
    assert (await store.latest_summary()).value == (
        "The user runs a small bakery in Porto with her husband."
    )
    assert any("ira" in n for n in report.notes)


async def test_a_message_the_models_context_cannot_hold_is_refused_in_words(store, llm, fake):
    """With the instructions and the message alone past the context (a page pasted into a
    small model), the server cut the prompt from its start, the instructions first, and the
    model answered what was left: "You said:  blue". Now it is said, and the message kept."""
    from navi_desktop.llm.errors import MessageTooLong

    sid = await new_session(store, ("user", "hello"), ("assistant", "Hi."))
    page = "My favourite colour is blue, and here is why. " * 3_000  # ~30k tokens
    asked = len(chat_bodies(fake))
    with pytest.raises(MessageTooLong) as err:
        await capped_turn(store, llm, sid, page)
    said = str(err.value)
    assert "the chat model's context holds 8,192" in said and "send a shorter message" in said
    assert len(chat_bodies(fake)) == asked  # nothing was sent
    assert (await store.messages(sid))[-1].content == page  # the message is kept


async def test_a_long_message_that_fits_is_answered(store, llm, fake):
    """A message past a search's 10,000 characters (a pasted page) is searched by its start:
    the memory search it feeds refused it, and the turn failed."""
    sid = await new_session(store, ("user", "hello"), ("assistant", "Hi."))
    page = "My favourite colour is blue, and here is why. " * 320  # ~14,700 characters
    fake.script(Reply("Blue it is."))
    result = await capped_turn(store, llm, sid, page)
    assert result.reply == "Blue it is."
