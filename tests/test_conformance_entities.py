"""Entity profiles on both backends (the ``any_store`` fixture): a profile by name or alias,
the list, rename and merge moving names and links, the model's enrichment, and the refusals a
user can cause, each one line that changes nothing."""

from __future__ import annotations

import pytest

from navi_desktop.errors import InvalidInput, NotFound
from navi_desktop.memory.entity_profiles import MAX_NAME


async def fact(store, value: str, **fields) -> int:
    return (await store.add_memory(value, **fields)).memory.id


async def names(store) -> dict[str, list[str]]:
    """Every entity with its aliases, through the list."""
    page, _ = await store.list_entities(sort="name", limit=1000)
    return {e.name: e.aliases for e in page}


@pytest.fixture
async def lisbon(any_store):
    """Lisbon (two facts, a summary, a message), Lisboa (one fact), Joana (one fact)."""
    ids = {
        "home": await fact(
            any_store, "moved to Lisbon last year", key="home city", category="profile"
        ),
        "trip": await fact(any_store, "plans a trip to Lisbon in May", category="projects"),
        "pastry": await fact(
            any_store, "Lisboa has the best pastel de nata", category="preferences"
        ),
        "sister": await fact(
            any_store, "Joana lives in Porto", key="sister", category="relationships"
        ),
        "summary": await fact(any_store, "We talked about flats in Lisbon.", kind="episode"),
    }
    session = await any_store.create_session()
    await any_store.save_message(session.id, "user", "flights to Lisbon are cheap in May")
    ids["session"] = session.id
    return ids


async def test_a_profile_names_its_current_memories_and_counts_mentions(any_store, lisbon):
    profile = await any_store.entity("  LISBON ")  # any case, any spacing
    assert (profile.name, profile.type, profile.aliases) == ("lisbon", None, [])
    assert (profile.mentions, profile.messages) == (4, 1)
    assert [m.id for m in profile.facts] == [lisbon["trip"], lisbon["home"]]  # newest first
    assert [m.id for m in profile.episodes] == [lisbon["summary"]]
    assert (profile.facts_total, profile.episodes_total) == (2, 1)
    short = await any_store.entity("lisbon", limit=1)  # a limit cuts the lists, not the totals
    assert [m.id for m in short.facts] == [lisbon["trip"]] and short.facts_total == 2
    await any_store.archive(lisbon["trip"])  # only current memories are listed
    after = await any_store.entity("lisbon")
    assert ([m.id for m in after.facts], after.facts_total) == ([lisbon["home"]], 1)
    with pytest.raises(InvalidInput, match="limit must be at least 1"):
        await any_store.entity("lisbon", limit=0)


async def test_the_list_pages_sorts_and_filters(any_store, lisbon):
    page, total = await any_store.list_entities()
    assert total == 4
    assert [(e.name, e.mentions) for e in page] == [
        ("lisbon", 4),
        ("joana", 1),
        ("lisboa", 1),
        ("porto", 1),
    ]
    by_name, _ = await any_store.list_entities(sort="name", limit=2, offset=1)
    assert [e.name for e in by_name] == ["lisboa", "lisbon"]
    found, total = await any_store.list_entities(query="LISB")
    assert ([e.name for e in found], total) == (["lisbon", "lisboa"], 2)
    assert await any_store.list_entities(query="100%_") == ([], 0)  # LIKE's wildcards are text
    assert await any_store.list_entities(query="!!") == ([], 0)
    await any_store.merge_entities("lisbon", "lisboa")
    found, total = await any_store.list_entities(query="boa")  # an alias matches too
    assert ([(e.name, e.aliases) for e in found], total) == ([("lisbon", ["lisboa"])], 1)
    with pytest.raises(InvalidInput, match="sort must be one of mentions, name"):
        await any_store.list_entities(sort="size")
    with pytest.raises(InvalidInput, match="limit must be at least 1"):
        await any_store.list_entities(limit=0)


async def test_merge_moves_names_links_and_type_without_duplicates(any_store, lisbon):
    both = await fact(any_store, "Lisbon, or Lisboa as locals say", category="other")
    assert (await any_store.entity("lisbon")).mentions == 5
    assert (await any_store.entity("lisboa")).mentions == 2
    # The model's reading gives Lisboa a type; the merged entity takes it.
    await any_store.save_model_entities({lisbon["pastry"]: [("Lisboa", "location")]}, "m1")
    await any_store.merge_entities("porto", "joana")  # joana becomes an alias of porto
    profile = await any_store.merge_entities("Lisbon", "lisboa")
    assert (profile.name, profile.aliases, profile.type) == ("lisbon", ["lisboa"], "location")
    assert {m.id for m in profile.facts} == {
        lisbon["home"],
        lisbon["trip"],
        lisbon["pastry"],
        both,
    }
    assert profile.mentions == 6  # the memory that said both names is linked once
    assert await names(any_store) == {"lisbon": ["lisboa"], "porto": ["joana"]}
    await any_store.merge_entities("lisbon", "joana")  # its aliases come along
    assert await names(any_store) == {"lisbon": ["joana", "lisboa", "porto"]}
    # A later mention of an alias is linked to the entity: the merge stays merged.
    await any_store.save_message(lisbon["session"], "user", "Lisboa at night is lovely")
    assert (await any_store.entity("lisboa")).name == "lisbon"
    assert (await any_store.entity("lisbon")).messages == 2
    assert await names(any_store) == {"lisbon": ["joana", "lisboa", "porto"]}


async def test_rename_keeps_the_old_name_as_an_alias(any_store, lisbon):
    profile = await any_store.rename_entity("lisbon", "  Lisbon   City ")
    assert (profile.name, profile.aliases, profile.mentions) == ("Lisbon City", ["lisbon"], 4)
    assert (await any_store.entity("lisbon")).name == "Lisbon City"  # found by its old name
    await any_store.save_message(lisbon["session"], "user", "Lisbon trams are yellow")
    assert (await any_store.entity("Lisbon City")).messages == 2
    assert "lisbon" not in await names(any_store)
    # A change of case only: no alias for it.
    assert (await any_store.rename_entity("lisbon city", "LISBON CITY")).aliases == ["lisbon"]
    # Back to an alias of its own: the two swap.
    back = await any_store.rename_entity("lisbon city", "Lisbon")
    assert (back.name, back.aliases) == ("Lisbon", ["LISBON CITY"])


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (("entity", "lisbn"), "no entity named 'lisbn'; did you mean 'lisbon'?"),
        (("entity", "zzz"), "no entity named 'zzz' (`navi memory entities` lists the names"),
        (("entity", "   "), "the entity's name is empty"),
        (("entity", "?!"), "has no letters or digits"),
        (("entity", "x" * (MAX_NAME + 1)), f"at most {MAX_NAME}"),
        (("merge_entities", "lisbon", "LISBON"), "cannot merge 'lisbon' with itself"),
        (("merge_entities", "lisbon", "lisbno"), "no entity named 'lisbno'; did you mean"),
        (("merge_entities", "lisbon", ""), "the other entity's name is empty"),
        (("rename_entity", "lisbon", "Joana"), "there is already an entity named 'joana'"),
        (("rename_entity", "lisbon", "lisbon"), "the entity is already named 'lisbon'"),
        (("rename_entity", "lisbon", " "), "the new name is empty"),
        (("rename_entity", "nowhere", "Somewhere"), "no entity named 'nowhere'"),
    ],
)
async def test_bad_input_is_refused_in_one_line_and_changes_nothing(any_store, lisbon, call, error):
    before = await names(any_store)
    method, *args = call
    with pytest.raises(InvalidInput) as caught:
        await getattr(any_store, method)(*args)
    assert error in str(caught.value) and "\n" not in str(caught.value)
    assert await names(any_store) == before


async def test_a_taken_name_says_merge_instead_and_suggests_by_alias(any_store, lisbon):
    await any_store.merge_entities("porto", "joana")
    with pytest.raises(InvalidInput) as caught:
        await any_store.rename_entity("lisbon", "Joana")
    assert str(caught.value) == (
        "'Joana' is already another name of 'porto': merge instead (keep 'porto' and merge"
        " 'lisbon' into it)"
    )
    with pytest.raises(InvalidInput) as caught:
        await any_store.merge_entities("joana", "porto")
    assert (
        str(caught.value)
        == "'joana' and 'porto' are already one entity ('porto'): nothing to merge"
    )
    with pytest.raises(NotFound, match=r"did you mean 'joana' \(another name of 'porto'\)"):
        await any_store.entity("joanna")
    assert await names(any_store) == {"lisbon": [], "lisboa": [], "porto": ["joana"]}


async def test_the_model_reads_each_memory_once(any_store):
    plain = await fact(any_store, "likes hiking on weekends", category="preferences")
    named = await fact(any_store, "Joana and Rui run Quillon together", category="projects")
    waiting = await any_store.needing_entities()
    assert [m.id for m in waiting] == [plain]  # the other already names three entities
    assert [m.id for m in await any_store.needing_entities(few=5)] == [named, plain]
    assert [m.id for m in await any_store.needing_entities(few=5, limit=1)] == [named]

    added = await any_store.save_model_entities(
        {plain: [("Sintra", "location"), ("hiking", "bogus")], 999999: [("Nowhere", "other")]},
        "small-model",
    )
    assert added == 2  # the memory that is gone is skipped
    assert (await any_store.entity("sintra")).type == "location"
    assert (await any_store.entity("hiking")).type is None  # not a known type
    assert [m.id for m in (await any_store.entity("Sintra")).facts] == [plain]
    assert [m.id for m in await any_store.needing_entities(few=5)] == [named]  # read once
    # Read again (a newer model): marked again, nothing linked twice.
    assert await any_store.save_model_entities({plain: [("Sintra", "location")]}, "m2") == 0
    with pytest.raises(NotFound):
        await any_store.entity("nowhere")
