"""Scheduled jobs through the fake Ollama: weekly reflection, stale profile, decay, backfill."""

from __future__ import annotations

import json

from navi_desktop.pipeline.maintenance import reflect, run_maintenance
from tests.fake_ollama import Reply
from tests.pipeline_helpers import SETTINGS


def insights(*texts):
    return Reply(content=json.dumps({"insights": list(texts)}))


async def test_reflection_needs_three_new_facts_and_runs_weekly(store, llm, fake):
    await store.add_memory("runs every morning", key="exercise")
    await store.add_memory("training for a marathon", key="goal")
    assert await reflect(store, llm, SETTINGS, now="2030-01-01T00:00:00Z") == []
    assert fake.bodies() == []  # too few new facts: no model call

    await store.add_memory("eats plant-based", key="diet")
    fake.script(insights("The user runs every morning while training for a marathon."))
    ids = await reflect(store, llm, SETTINGS, now="2030-01-01T00:00:00Z")
    assert len(ids) == 1
    memory = await store.get(ids[0])
    assert memory.kind == "reflection" and memory.source == "auto_discovery"
    prompt = fake.bodies()[0]["messages"][1]["content"]
    assert "training for a marathon" in prompt and "eats plant-based" in prompt

    for i in range(3):
        await store.add_memory(f"new fact {i}", key=f"k{i}")
    assert await reflect(store, llm, SETTINGS, now="2030-01-03T00:00:00Z") == []  # same week
    fake.script(insights("Each of the new facts connects."))
    assert len(await reflect(store, llm, SETTINGS, now="2030-01-09T00:00:00Z")) == 1
    assert len(fake.bodies()) == 2


async def test_bad_reflection_output_writes_nothing(store, llm, fake):
    for i in range(3):
        await store.add_memory(f"fact {i}", key=f"k{i}")
    fake.script(Reply(content=json.dumps({"insights": "not a list"})))
    report = await run_maintenance(store, llm, SETTINGS)
    assert report.reflections == [] and "reflection" in report.errors[0]
    assert (await store.list_memories(kind="reflection"))[1] == 0
    assert await store.get_meta("last_reflection_at") is None  # retried next time


async def test_maintenance_rewrites_a_stale_profile_and_survives_a_dead_server(store, llm, fake):
    await store.add_memory("lives in Porto", key="city")
    fake.script(Reply(content=json.dumps({"profile": "The user lives in Porto."})))
    report = await run_maintenance(store, llm, SETTINGS)
    assert report.profile_refreshed
    assert await store.profile_summary() == ("The user lives in Porto.", False)

    await store.add_memory("likes fado", key="music")  # stale again
    await fake.stop()
    report = await run_maintenance(store, llm, SETTINGS)
    assert not report.profile_refreshed
    assert (await store.profile_summary())[1] is True  # still stale, retried next run


async def test_maintenance_without_a_model_still_decays(store):
    old = (await store.add_memory("liked a band in 2010", key="band")).memory
    await store.db.execute("UPDATE memories SET updated_at = '2020-01-01T00:00:00.000Z'")
    report = await run_maintenance(store, None, None, now="2030-01-01T00:00:00Z")
    assert report.archived == [old.id]
