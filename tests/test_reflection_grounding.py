"""A weekly reflection's insights are checked like any candidate: grounded in the facts they
were given, sensitive ones held for review, lengths clamped. Through the fake Ollama, with a
real store file."""

from __future__ import annotations

import json
import logging

from navi_desktop.pipeline.grounding import REFLECTION_CHARS, check_insight, clamp
from navi_desktop.pipeline.maintenance import reflect, run_maintenance
from tests.fake_ollama import Reply
from tests.pipeline_helpers import SETTINGS

NOW = "2030-01-01T00:00:00Z"


def insights(*items: object) -> Reply:
    return Reply(content=json.dumps({"insights": list(items)}))


async def running_facts(store) -> None:
    await store.add_memory("runs every morning", key="exercise", category="preferences")
    await store.add_memory("training for a marathon", key="goal", category="projects")
    await store.add_memory("eats plant-based meals", key="diet", category="preferences")


async def reflections(store, status: str | None = "active") -> list:
    return (
        await store.list_memories(kind="reflection", status=status, sort="id", descending=False)
    )[0]


async def test_an_insight_not_grounded_in_the_facts_is_not_stored(store, llm, fake, caplog):
    await running_facts(store)
    fake.script(
        insights(
            "The user is a professional violinist touring Vienna.",  # nothing of the facts
            "The user runs every morning while training for a marathon.",
            "The user has run 42 marathons every morning.",  # a number the facts never gave
        )
    )
    dropped: list[str] = []
    with caplog.at_level(logging.INFO, logger="navi_desktop.pipeline.maintenance"):
        ids = await reflect(store, llm, SETTINGS, now=NOW, dropped=dropped)
    assert [m.value for m in await reflections(store, None)] == [
        "The user runs every morning while training for a marathon."
    ]
    assert len(ids) == 1
    assert len(dropped) == 2 and all("not grounded in the facts" in d for d in dropped)
    assert "violinist" in dropped[0] and "42" in dropped[1]
    assert "reflection left out (not grounded in the facts" in caplog.text
    # Looked at: the same facts are not reflected on again this week.
    assert await store.get_meta("last_reflection_at") == NOW


async def test_a_sensitive_insight_waits_for_review(store, llm, fake):
    await running_facts(store)
    # Accepted by the user long ago: facts, but an insight built on them is a new claim.
    await store.add_memory("Anna", key="sister", category="relationships")
    await store.add_memory("mild asthma", key="condition", category="health")
    fake.script(
        insights(
            "The user trains for a marathon despite mild asthma.",  # draws on a health fact
            "The user trains for a marathon with Anna.",  # and on a relationships fact
            "The user eats plant-based meals to fuel marathon training.",
        )
    )
    await reflect(store, llm, SETTINGS, now=NOW)
    assert [m.value for m in await reflections(store)] == [
        "The user eats plant-based meals to fuel marathon training."
    ]
    held = await reflections(store, "held")
    assert sorted(m.value for m in held) == [
        "The user trains for a marathon despite mild asthma.",
        "The user trains for a marathon with Anna.",
    ]
    assert {m.review_reason for m in held} == {"sensitive: waiting for your review"}


async def test_lengths_and_counts_are_clamped_and_bad_items_dropped_one_by_one(store, llm, fake):
    await running_facts(store)
    rambling = "The user runs every morning for marathon training. " * 25  # 1,275 characters
    fake.script(
        insights(
            rambling,
            42,
            "The user is training for a marathon and runs every morning.",
            "The user eats plant-based meals for marathon training.",  # past the schema's three
        )
    )
    report = await run_maintenance(store, llm, SETTINGS)  # (a far "now" would decay them)
    values = [m.value for m in await reflections(store)]
    assert len(values) == 2
    assert all(len(v) <= REFLECTION_CHARS for v in values)
    assert values[0].startswith("The user runs every morning for marathon training.") and values[
        0
    ].endswith(".")
    assert values[1] == "The user is training for a marathon and runs every morning."
    assert not [e for e in report.errors if e.startswith("reflection")]
    assert [d.rsplit(": ", 1)[1] for d in report.reflections_dropped] == [
        "not a sentence",
        "more than 3 insights in one answer",
    ]


def test_the_checks_on_their_own():
    facts = [("user home city: Porto", False), ("user instrument: cello", False)]
    assert check_insight("The user plays the cello in Porto.", facts).text is not None
    assert check_insight('{"insight": "cello"}', facts).why == "not prose"
    assert check_insight("Music seems important to the user.", facts).why == (
        "not grounded in the facts (music)"
    )
    assert check_insight("It clearly matters deeply to the user.", facts).why == (
        "says nothing the facts say"
    )
    assert check_insight("Porto and cello.", facts).why == "too short to be an insight"
    assert check_insight("The user lives in the city of Porto.", facts).why == (
        "restates one fact, connects none"
    )
    therapy = check_insight("The user plays the cello as therapy in Porto.", facts)
    assert therapy.held and therapy.text  # grounded enough, but a health word in its own
    secret = check_insight("The user's api key for Porto is sk-abcdefghijklmnop.", facts)
    assert secret.text is None and "secret" in (secret.why or "")
    one_long = "cello " * 100
    cut = clamp(one_long, 50)
    assert len(cut) <= 50 and cut.endswith("…") and " " not in cut[-2:]
