"""The model's entity pass in maintenance: only names written in the memory are linked, with
a known type; memories are read once; a failed request is retried; forgetting removes what it
found, aliases included."""

from __future__ import annotations

import json

from navi_desktop.llm.budget import unbounded_paths
from navi_desktop.pipeline.entity_pass import enrich_entities, entity_schema
from navi_desktop.pipeline.maintenance import run_maintenance
from tests.fake_ollama import Reply
from tests.pipeline_helpers import SETTINGS


def entities(*items: tuple[int, str, str]) -> Reply:
    return Reply(json.dumps({"entities": [{"text": t, "name": n, "type": k} for t, n, k in items]}))


async def linked(store, memory_id: int) -> dict[str, str | None]:
    rows = await store.db.fetchall(
        "SELECT e.name, e.type FROM entities e JOIN entity_links l ON l.entity_id = e.id"
        " WHERE l.memory_id = ?",
        (memory_id,),
    )
    return {r["name"]: r["type"] for r in rows}


def test_the_schema_is_bounded():
    assert unbounded_paths(entity_schema(8)) == []


async def test_only_names_written_in_the_memory_are_kept(store, llm, fake):
    # lower case: the regex fast path finds no name in it
    work = (await store.add_memory("works with priya at acme robotics in leeds", key="job")).memory
    pet = (await store.add_memory("has a dog", key="pet")).memory
    assert await linked(store, work.id) == {}
    # newest first: text 1 is the pet, text 2 the job
    fake.script(
        entities(
            (2, "Priya", "person"),
            (2, "Acme Robotics", "organisation"),
            (2, "Leeds", "location"),
            (2, "Atlantis", "location"),  # not in the text: invented
            (2, "acme", "fruit"),  # no such type
            (1, "the", "person"),  # a function word
            (3, "Bob", "person"),  # no text 3
            (1, "dog", "person"),  # written there, so kept: the model's call
        )
    )
    assert await enrich_entities(store, llm, SETTINGS) == 4
    assert await linked(store, work.id) == {
        "Priya": "person",
        "Acme Robotics": "organisation",
        "Leeds": "location",
    }
    assert await linked(store, pet.id) == {"dog": "person"}
    prompt = fake.bodies()[0]["messages"][1]["content"]
    assert '1. "user pet: has a dog"' in prompt and "acme robotics" in prompt
    # Read once: no second request for the same memories.
    assert await enrich_entities(store, llm, SETTINGS) == 0
    assert len(fake.bodies()) == 1


async def test_memories_with_entities_already_are_not_asked_about(store, llm, fake):
    await store.add_memory("Lunch with Maria and Tomas in Lisbon", key="plans")
    assert await store.needing_entities() == []
    await enrich_entities(store, llm, SETTINGS)
    assert fake.bodies() == []


async def test_a_failed_request_leaves_the_memories_for_the_next_run(store, llm, fake):
    memory = (await store.add_memory("meets jonas every week", key="habit")).memory
    fake.script(Reply("I could not find any entities, sorry."))  # not JSON
    report = await run_maintenance(store, llm, SETTINGS)
    assert any(e.startswith("entities:") for e in report.errors), report.errors
    assert [m.id for m in await store.needing_entities()] == [memory.id]
    # (the stale profile summary is rewritten first)
    fake.script(
        Reply(json.dumps({"profile": "Meets Jonas every week."})), entities((1, "Jonas", "person"))
    )
    report = await run_maintenance(store, llm, SETTINGS)
    assert report.entity_links == 1 and await linked(store, memory.id) == {"Jonas": "person"}


async def test_forgetting_removes_found_entities_and_aliases(store, llm, fake):
    memory = (await store.add_memory("okonkwo", key="sailing partner")).memory
    fake.script(entities((1, "Okonkwo", "person")))
    assert await enrich_entities(store, llm, SETTINGS) == 1
    stays = (await store.add_memory("member of a club", key="club")).memory
    async with store.db.transaction():  # the name is also another entity's alias
        await store.db.execute(
            "INSERT INTO entities (name, norm) VALUES ('Sailing club', 'sailing club')"
        )
        club = await store.db.scalar("SELECT id FROM entities WHERE norm = 'sailing club'")
        await store.db.execute(
            "INSERT INTO entity_links (entity_id, memory_id) VALUES (?, ?)", (club, stays.id)
        )
        await store.db.execute(
            "INSERT INTO entity_aliases (entity_id, name, norm) VALUES (?, 'Okonkwo', 'okonkwo')",
            (club,),
        )
    report = await store.forget(memory.id)
    assert "2 entity names" in report.redacted
    assert await store.db.scalar("SELECT count(*) FROM entities WHERE norm = 'okonkwo'") == 0
    assert await store.db.scalar("SELECT count(*) FROM entity_aliases") == 0
    assert await store.db.scalar("SELECT 1 FROM entities WHERE id = ?", (club,)) == 1
    assert b"okonkwo" not in store.path.read_bytes().lower()
