"""Entity profiles in the engine (real SQLite files): a profile by name or alias, the list,
merge and rename, the refusals a user can cause, and forgetting that leaves no entity behind."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.memory import MemoryStore


async def fact(store: MemoryStore, value: str, **fields) -> int:
    return (await store.add_memory(value, **fields)).memory.id


async def names(store: MemoryStore) -> dict[str, list[str]]:
    """Every entity with its aliases, straight from the tables."""
    rows = await store.db.fetchall(
        "SELECT e.name, a.name FROM entities e LEFT JOIN entity_aliases a ON a.entity_id = e.id"
    )
    out: dict[str, list[str]] = {}
    for name, alias in rows:
        out.setdefault(name, [])
        if alias:
            out[name].append(alias)
    return {k: sorted(v) for k, v in out.items()}


async def linked(store: MemoryStore, name: str) -> list[tuple[int | None, int | None]]:
    return [
        tuple(r)
        for r in await store.db.fetchall(
            "SELECT l.memory_id, l.message_id FROM entity_links l JOIN entities e"
            " ON e.id = l.entity_id WHERE e.name = ? ORDER BY 1, 2",
            (name,),
        )
    ]


@pytest.fixture
async def lisbon(store):
    """Lisbon (two facts, a summary, a message), Lisboa (one fact), Joana (one fact)."""
    ids = {
        "home": await fact(store, "moved to Lisbon last year", key="home city", category="profile"),
        "trip": await fact(store, "plans a trip to Lisbon in May", category="projects"),
        "pastry": await fact(store, "Lisboa has the best pastel de nata", category="preferences"),
        "sister": await fact(store, "Joana lives in Porto", key="sister", category="relationships"),
        "summary": await fact(store, "We talked about flats in Lisbon.", kind="episode"),
    }
    session = await store.create_session()
    await store.save_message(session.id, "user", "flights to Lisbon are cheap in May")
    return ids


async def test_a_profile_names_its_memories_and_counts_mentions(store, lisbon):
    profile = await store.entity("LISBON")  # any case, any spacing
    assert (profile.name, profile.type, profile.aliases) == ("lisbon", None, [])
    assert (profile.mentions, profile.messages) == (4, 1)
    assert [m.id for m in profile.facts] == [lisbon["trip"], lisbon["home"]]  # newest first
    assert [m.id for m in profile.episodes] == [lisbon["summary"]]
    assert (profile.facts_total, profile.episodes_total) == (2, 1)
    # A limit cuts the lists, not the totals.
    short = await store.entity("lisbon", limit=1)
    assert [m.id for m in short.facts] == [lisbon["trip"]] and short.facts_total == 2
    # The type a model gave it (maintenance's entity pass) shows.
    await store.db.execute("UPDATE entities SET type = 'location' WHERE norm = 'lisbon'")
    assert (await store.entity("lisbon")).type == "location"


async def test_a_profile_lists_only_current_memories(store, lisbon):
    await store.correct(lisbon["home"], "moved to Lisbon, Alfama")  # the old version stays
    await store.archive(lisbon["trip"])
    soon = (date.today() + timedelta(days=7)).isoformat()
    later = await fact(store, "in Lisbon this week", expires_at=soon)
    gone = await fact(store, "on call in Lisbon", expires_at=soon)
    await store.db.execute(
        "UPDATE memories SET expires_at = '2001-01-01T00:00:00.000Z' WHERE id = ?", (gone,)
    )
    profile = await store.entity("lisbon")
    texts = [m.value for m in profile.facts]
    assert texts == ["in Lisbon this week", "moved to Lisbon, Alfama"]
    assert profile.facts_total == 2 and later in [m.id for m in profile.facts]


async def test_the_list_pages_sorts_and_filters(store, lisbon):
    page, total = await store.list_entities()
    assert total == 4
    assert [(e.name, e.mentions) for e in page] == [
        ("lisbon", 4),
        ("joana", 1),
        ("lisboa", 1),
        ("porto", 1),
    ]
    by_name, _ = await store.list_entities(sort="name", limit=2, offset=1)
    assert [e.name for e in by_name] == ["lisboa", "lisbon"]
    found, total = await store.list_entities(query="LISB")
    assert ([e.name for e in found], total) == (["lisbon", "lisboa"], 2)
    assert await store.list_entities(query="100%_") == ([], 0)  # LIKE's wildcards are text
    assert await store.list_entities(query="!!") == ([], 0)  # punctuation is not "anything"
    await store.merge_entities("lisbon", "lisboa")
    found, total = await store.list_entities(query="boa")  # an alias matches too
    assert ([(e.name, e.aliases) for e in found], total) == ([("lisbon", ["lisboa"])], 1)


async def test_merge_joins_names_and_moves_links_without_duplicates(store, lisbon):
    both = await fact(store, "Lisbon, or Lisboa as locals say", category="other")
    await store.db.execute("UPDATE entities SET type = 'location' WHERE norm = 'lisboa'")
    await store.merge_entities("porto", "joana")  # joana becomes an alias of porto
    profile = await store.merge_entities("Lisbon", "lisboa")
    assert (profile.name, profile.aliases, profile.type) == ("lisbon", ["lisboa"], "location")
    assert {m.id for m in profile.facts} == {
        lisbon["home"],
        lisbon["trip"],
        lisbon["pastry"],
        both,
    }
    # One link per memory, however many of its names the memory says.
    assert [mid for mid, _ in await linked(store, "lisbon")].count(both) == 1
    assert await names(store) == {"lisbon": ["lisboa"], "porto": ["joana"]}
    # Merging an entity that has aliases brings them along.
    await store.merge_entities("lisbon", "joana")
    assert await names(store) == {"lisbon": ["joana", "lisboa", "porto"]}
    # A later mention of an alias is linked to the entity: the merge stays merged.
    session = await store.create_session()
    said = await store.save_message(session.id, "user", "Lisboa at night is lovely")
    assert (None, said.id) in await linked(store, "lisbon")
    assert await names(store) == {"lisbon": ["joana", "lisboa", "porto"]}
    assert (await store.entity("lisboa")).name == "lisbon"


async def test_search_finds_an_entity_by_any_of_its_names(store, lisbon):
    before = {h.id for h in await store.search("Lisboa")}
    assert before == {lisbon["pastry"]}
    await store.merge_entities("lisbon", "lisboa")
    after = {h.id for h in await store.search("Lisboa")}
    assert after >= {lisbon["pastry"], lisbon["home"], lisbon["trip"]}


async def test_rename_keeps_the_old_name_as_an_alias(store, lisbon):
    profile = await store.rename_entity("lisbon", "  Lisbon   City ")
    assert (profile.name, profile.aliases, profile.mentions) == ("Lisbon City", ["lisbon"], 4)
    assert (await store.entity("lisbon")).name == "Lisbon City"  # found by its old name
    # The old name is still how text links to it: no second "lisbon" appears.
    session = await store.create_session()
    said = await store.save_message(session.id, "user", "Lisbon trams are yellow")
    assert (None, said.id) in await linked(store, "Lisbon City")
    assert "lisbon" not in await names(store)
    # A change of case only: no alias for it.
    assert (await store.rename_entity("lisbon city", "LISBON CITY")).aliases == ["lisbon"]
    # Back to an alias of its own: the two swap.
    back = await store.rename_entity("lisbon city", "Lisbon")
    assert (back.name, back.aliases) == ("Lisbon", ["LISBON CITY"])


# Bad names and calls are refused in one line: tests/test_conformance_entities.py, on both
# backends.


async def test_renaming_onto_a_taken_name_says_merge_instead(store, lisbon):
    await store.merge_entities("porto", "joana")
    with pytest.raises(InvalidInput) as caught:
        await store.rename_entity("lisbon", "Joana")
    assert str(caught.value) == (
        "'Joana' is already another name of 'porto': merge instead (keep 'porto' and merge"
        " 'lisbon' into it)"
    )
    with pytest.raises(InvalidInput) as caught:
        await store.merge_entities("joana", "porto")
    assert str(caught.value) == (
        "'joana' and 'porto' are already one entity ('porto'): nothing to merge"
    )
    with pytest.raises(NotFound, match=r"did you mean 'joana' \(another name of 'porto'\)"):
        await store.entity("joanna")
    assert await names(store) == {"lisbon": [], "lisboa": [], "porto": ["joana"]}


async def test_forgetting_the_only_mention_removes_the_entity_and_its_aliases(store):
    cat = await fact(store, "has a cat called Miso", key="pet", category="relationships")
    keep = await fact(store, "likes green tea", key="drink", category="preferences")
    await store.rename_entity("miso", "Misou")  # "miso" is now an alias
    assert (await store.entity("miso")).name == "Misou"
    assert {h.id for h in await store.search("Misou")} == {cat}

    await store.forget(cat)

    for name in ("miso", "Misou"):
        with pytest.raises(NotFound):
            await store.entity(name)
        assert await store.search(name, kinds=["fact", "episode", "rule", "message"]) == []
    assert await store.list_entities(query="mis") == ([], 0)
    for table in ("entities", "entity_aliases"):
        rows = await store.db.fetchall(f"SELECT name, norm FROM {table}")
        assert not [r for r in rows if "mis" in r["norm"]], table
    assert [h.id for h in await store.search("green tea")] == [keep]


async def test_forgetting_an_alias_text_removes_the_alias_but_keeps_the_entity(store):
    sister = await fact(store, "Joana lives in Porto", key="sister", category="relationships")
    nickname = await fact(store, "Jo", key="sister's nickname", category="relationships")
    await store.merge_entities("joana", "jo")
    assert (await store.entity("jo")).name == "joana"
    assert {h.id for h in await store.search("Jo")} == {sister, nickname}  # through the alias

    await store.forget(nickname)

    profile = await store.entity("joana")
    assert (profile.aliases, [m.id for m in profile.facts]) == ([], [sister])
    with pytest.raises(NotFound):
        await store.entity("jo")
    assert await store.search("Jo") == []  # the alias no longer leads to Joana
    assert await names(store) == {"joana": [], "porto": []}


async def test_deleting_the_only_session_that_mentions_it_removes_the_entity(store):
    session = await store.create_session()
    await store.save_message(session.id, "user", "Quillon is my new project")
    await store.rename_entity("quillon", "Quillon")
    await store.delete_session(session.id)
    assert await names(store) == {}
