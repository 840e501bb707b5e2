"""``navi memory entity`` and ``navi memory entities`` on a real profile file (the ``cli``
fixture runs the real command in-process): the profile, the list, rename, merge, and one line
for each mistake."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def seeded(cli):
    for args in (
        ("home city", "moved to Lisbon last year"),
        ("pastry", "Lisboa has the best pastel de nata"),
        ("sister", "Joana lives in Porto"),
        ("plans a trip to Lisbon in May",),
    ):
        code, _, err = cli("add", *args)
        assert code == 0, err
    return cli


def test_no_entities_yet(cli):
    assert cli("entities") == (
        0,
        "No entities yet: Navi notes the names you mention as you chat.\n",
        "",
    )


def test_the_list_and_its_pages(seeded):
    code, out, err = seeded("entities")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "NAME    TYPE  MENTIONS  ALIASES",
        "lisbon  -     2         -",
        "joana   -     1         -",
        "lisboa  -     1         -",
        "porto   -     1         -",
    ]
    code, out, _ = seeded("entities", "--sort", "name", "--limit", "2", "--offset", "1")
    assert out.splitlines()[1:] == [
        "lisboa  -     1         -",
        "lisbon  -     2         -",
        "(2-3 of 4; next page: --offset 3)",
    ]
    _, out, _ = seeded("entities", "--search", "xyz")
    assert out == "No entity has a name that contains 'xyz'.\n"
    _, out, _ = seeded("--json", "entities", "--search", "lisb")
    doc = json.loads(out)
    assert doc["total"] == 2
    assert doc["entities"][0] == {"name": "lisbon", "type": None, "aliases": [], "mentions": 2}


def test_a_profile_then_merge_then_rename(seeded):
    code, out, err = seeded("entity", "Lisbon")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "lisbon",
        "  type       -",
        "  aliases    -",
        "  mentions   2 (2 memories, 0 messages)",
        "Facts (2):",
        "  #4  user: plans a trip to Lisbon in May",
        "  #1  user home city: moved to Lisbon last year",
    ]
    code, out, _ = seeded("entity", "lisbon", "--merge", "Lisboa")
    assert out.splitlines()[:3] == ["Merged 'Lisboa' into 'lisbon'.", "lisbon", "  type       -"]
    assert "  aliases    lisboa" in out and "#2  user pastry: Lisboa has" in out
    code, out, _ = seeded("entity", "lisboa", "--rename", "Lisbon")
    assert out.splitlines()[:2] == ["Renamed 'lisboa' to 'Lisbon'.", "Lisbon"]
    _, out, _ = seeded("--json", "entity", "lisboa", "--limit", "1")
    doc = json.loads(out)
    assert (doc["name"], doc["aliases"], doc["mentions"]) == ("Lisbon", ["lisboa"], 3)
    assert (len(doc["facts"]), doc["facts_total"]) == (1, 3)
    _, out, _ = seeded("--json", "entity", "porto", "--merge", "joana")
    assert json.loads(out)["action"] == "merged"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("entity", "lisbn"), "navi: no entity named 'lisbn'; did you mean 'lisbon'?"),
        (("entity", " "), "navi: the entity's name is empty: give a name"),
        (("entity", "lisbon", "--merge", "LISBON"), "navi: cannot merge 'lisbon' with itself"),
        (
            ("entity", "lisbon", "--rename", "Porto"),
            "navi: there is already an entity named 'porto': merge instead (keep 'porto' and"
            " merge 'lisbon' into it)",
        ),
        (("entity", "lisbon", "--rename", ""), "navi: --rename is empty: give a name"),
        (("entity", "lisbon", "--merge", "nowhere"), "navi: no entity named 'nowhere'"),
        (("entity", "lisbon", "--limit", "0"), "navi: --limit must be between 1 and 10000"),
        (("entities", "--offset", "-1"), "navi: --limit must be at least 1 and --offset not"),
    ],
)
def test_mistakes_get_one_line_and_change_nothing(seeded, args, error):
    _, before, _ = seeded("--json", "entities")
    code, out, err = seeded(*args)
    assert (code, out) == (2, "")
    assert err.startswith(error) and err.count("\n") == 1
    assert seeded("--json", "entities")[1] == before


def test_rename_and_merge_together_is_a_usage_error(seeded):
    code, _, err = seeded("entity", "lisbon", "--rename", "A", "--merge", "lisboa")
    assert code == 2
    assert "argument --merge: not allowed with argument --rename" in err
