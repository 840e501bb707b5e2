"""Facts that expire, and confirming a fact: the engine on a real file, extraction through the
real backend against the fake Ollama, and the real ``navi memory`` CLI.

An expired fact leaves search and the memory block at once, is archived by maintenance (never
deleted) with a history row, and stays out of the profile summary. Confirming pins a fact,
sets its confidence to 1 and records when."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from navi_desktop.errors import InvalidInput
from navi_desktop.expiry import describe, parse_expires
from navi_desktop.llm.budget import unbounded_paths
from navi_desktop.memory.clock import iso, now_iso, parse_iso
from navi_desktop.memory.db import Database
from navi_desktop.memory.migrations import MIGRATIONS, migrate
from navi_desktop.memory.store import MemoryStore
from navi_desktop.pipeline.context import build_context
from navi_desktop.pipeline.extraction import EXTRACTION_SCHEMA
from navi_desktop.pipeline.maintenance import run_maintenance
from tests.pipeline_helpers import (
    SETTINGS,
    chat_bodies,
    extraction,
    fact,
    facts_by_key,
    learn,
    memory_rows,
    profile,
    prompt_of,
)
from tests.test_cli_memory import assert_user_error

NOW = datetime(2030, 6, 10, 12, 0, tzinfo=UTC)
PAST = "2020-01-01T00:00:00.000Z"
STEP = "0012_expiry_and_verification"


async def berlin(store: MemoryStore, **fields) -> int:
    result = await store.add_memory(
        "in Berlin", key="location", category="profile", evidence="I am in Berlin", **fields
    )
    return result.memory.id


async def expire(store: MemoryStore, memory_id: int, when: str = PAST) -> None:
    """Move a fact's expiry into the past, as time passing would."""
    async with store.db.transaction():
        await store.db.execute("UPDATE memories SET expires_at = ? WHERE id = ?", (when, memory_id))


# -- what a person types ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", "2030-06-17T12:00:00.000Z"),
        ("2w", "2030-06-24T12:00:00.000Z"),
        (" 1 day ", "2030-06-11T12:00:00.000Z"),
        ("2030-06-30T18:00Z", "2030-06-30T18:00:00.000Z"),
        ("never", None),
        ("NEVER", None),
    ],
)
def test_expiry_forms(text, expected):
    assert parse_expires(text, now=NOW) == expected


def test_a_date_means_through_that_day():
    stored = parse_expires("2030-06-30", now=NOW)
    local = parse_iso(stored).astimezone()
    assert (local.date().isoformat(), local.hour, local.minute) == ("2030-07-01", 0, 0)
    assert describe(stored, NOW).endswith("(end of 2030-06-30)")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("0d", "from 1 day to 3650 days"),
        ("-3d", "from 1 day to 3650 days"),
        ("99999d", "from 1 day to 3650 days"),
        ("600w", "from 1 day to 3650 days"),
        ("7", "needs a unit: 7d"),
        ("2020-01-01", "is in the past"),
        ("2030-06-10T11:00Z", "is in the past"),
        ("2045-01-01", "more than 3650 days"),
        ("2030-13-01", "must be a number of days or weeks (7d, 2w) or a date"),
        ("soon", "must be a number of days or weeks"),
        ("", "must be a number of days or weeks"),
        ("9" * 5000 + "d", "must be a number of days or weeks"),
    ],
)
def test_bad_expiry_names_the_cause_and_the_fix(text, needle):
    with pytest.raises(InvalidInput) as caught:
        parse_expires(text, "--expires", now=NOW)
    message = str(caught.value)
    assert needle in message and "\n" not in message and message.startswith("--expires")
    assert len(message) < 200


# -- the schema ---------------------------------------------------------------------------------


async def test_an_older_profile_gains_the_columns_and_keeps_its_facts(tmp_path):
    path = tmp_path / "memory.db"
    names = [name for name, _ in MIGRATIONS]
    db = await Database.open(path)
    await migrate(db, MIGRATIONS[: names.index(STEP)])
    async with db.transaction():
        await db.execute(
            "INSERT INTO memories (kind, category, key, norm_key, value, source, created_at,"
            " updated_at, valid_from) VALUES ('fact', 'profile', 'home', 'user:home', 'Lyon',"
            " 'conversation', ?, ?, ?)",
            (now_iso(), now_iso(), now_iso()),
        )
    await db.close()
    async with await MemoryStore.open(path) as store:
        rows = await memory_rows(store)
        assert [(r["value"], r["expires_at"], r["last_verified_at"]) for r in rows] == [
            ("Lyon", None, None)
        ]
        assert [m.value for m in (await store.list_memories(current=True))[0]] == ["Lyon"]
        assert (await store.confirm(rows[0]["id"])).last_verified_at is not None


# -- an expired fact leaves search and the prompt at once ----------------------------------------


async def test_an_expired_fact_leaves_search_and_the_memory_block_before_maintenance(store):
    staying = (await store.add_memory("Lyon", key="home city", category="profile")).memory.id
    leaving = await berlin(store, expires_at=iso(datetime.now(UTC) + timedelta(days=7)))
    assert {h.id for h in await store.search("Berlin Lyon")} == {staying, leaving}

    await expire(store, leaving)
    assert [h.id for h in await store.search("Berlin Lyon")] == [staying]
    # still there for whoever asks for everything (the inspector's "Archived too")
    assert leaving in {h.id for h in await store.search("Berlin", include_inactive=True)}
    turn = await build_context(
        store, user_text="Am I in Berlin or Lyon?", history=[], session_id=None, first_turn=False
    )
    block = turn.messages[0]["content"]
    assert "Lyon" in block and "Berlin" not in block
    assert [i.memory_id for i in turn.injections] == [staying]
    # nothing archived yet: only maintenance changes the row
    assert (await store.get(leaving)).status == "active"
    listed, total = await store.list_memories(kind="fact", current=True)
    assert [m.id for m in listed] == [staying] and total == 1


async def test_maintenance_archives_what_expired_pinned_too_with_a_history_row(store):
    staying = await berlin(store, expires_at=iso(datetime.now(UTC) + timedelta(days=3)))
    pinned = (await store.add_memory("on call", key="duty", category="projects")).memory.id
    await store.pin(pinned)
    await store.edit(pinned, expires_at=iso(datetime.now(UTC) + timedelta(days=1)))
    await expire(store, pinned)

    report = await run_maintenance(store, None, None)  # no model needed

    assert report.archived == [pinned]
    archived = await store.get(pinned)  # never deleted
    assert (archived.status, archived.pinned, archived.value) == ("archived", True, "on call")
    last = (await store.history(pinned))[-1]
    assert (last.action, last.actor) == ("archive", "system")
    assert last.old == {"status": "active"}
    assert last.new == {"status": "archived", "reason": "it expired", "expires_at": PAST}
    assert (await store.get(staying)).status == "active"
    assert (await run_maintenance(store, None, None)).archived == []  # once


async def test_a_temporary_fact_stays_out_of_the_profile_summary(store, llm, fake):
    await store.add_memory("Lyon", key="home city", category="profile")
    await berlin(store, expires_at=iso(datetime.now(UTC) + timedelta(days=3)))
    _, report = await learn(
        store,
        llm,
        fake,
        [("user", "I like oolong tea.")],
        extraction([fact("drink", "oolong tea", "I like oolong tea")]),
        profile("Lives in Lyon and likes oolong tea."),
    )
    assert report.profile_updated
    listing = prompt_of(chat_bodies(fake)[-1])
    assert "Lyon" in listing and "oolong" in listing and "Berlin" not in listing


# -- setting it ---------------------------------------------------------------------------------


async def test_add_and_edit_set_and_clear_an_expiry_with_history(store):
    ahead = iso(datetime.now(UTC) + timedelta(days=5))
    memory_id = await berlin(store, expires_at=ahead)
    assert (await store.get(memory_id)).expires_at == ahead
    create = (await store.history(memory_id))[0]
    assert create.new["expires_at"] == ahead

    later = iso(datetime.now(UTC) + timedelta(days=9))
    assert (await store.edit(memory_id, expires_at=later)).expires_at == later
    assert (await store.edit(memory_id, expires_at=None)).expires_at is None
    edits = [(h.old, h.new) for h in await store.history(memory_id) if h.action == "edit"]
    assert edits == [
        ({"expires_at": ahead}, {"expires_at": later}),
        ({"expires_at": later}, {"expires_at": None}),
    ]
    assert [h.id for h in await store.search("Berlin")] == [memory_id]  # still indexed


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"expires_at": PAST}, "is in the past"),
        ({"expires_at": "Friday"}, "expires_at must be an ISO date or time"),
        ({"expires_at": "2099-01-01"}, "more than 3650 days"),
        ({"expires_at": "2031-01-01", "kind": "rule"}, "only a fact can expire"),
    ],
)
async def test_a_bad_expiry_writes_nothing(store, fields, needle):
    before = await memory_rows(store)
    with pytest.raises(InvalidInput, match=needle):
        await store.add_memory("no emojis", **fields)
    assert await memory_rows(store) == before


async def test_editing_in_a_past_expiry_or_onto_a_rule_is_refused(store):
    memory_id = await berlin(store)
    rule = (await store.add_memory("answer in French", kind="rule")).memory.id
    before = await memory_rows(store)
    with pytest.raises(InvalidInput, match="is in the past"):
        await store.edit(memory_id, expires_at=PAST)
    with pytest.raises(InvalidInput, match="only a fact can expire"):
        await store.edit(rule, expires_at="2031-01-01")
    assert await memory_rows(store) == before


async def test_said_again_after_it_expired_it_holds_again(store):
    memory_id = await berlin(store, expires_at=iso(datetime.now(UTC) + timedelta(days=2)))
    await expire(store, memory_id)
    again = await store.add_memory(
        "in Berlin", key="location", category="profile", evidence="I am in Berlin"
    )
    assert (again.action, again.memory.id, again.memory.expires_at) == (
        "strengthened",
        memory_id,
        None,
    )
    assert [h.id for h in await store.search("Berlin")] == [memory_id]


async def test_a_correction_keeps_the_expiry(store):
    ahead = iso(datetime.now(UTC) + timedelta(days=4))
    memory_id = await berlin(store, expires_at=ahead)
    new = await store.correct(memory_id, "in Munich")
    assert new.expires_at == ahead


# -- confirming -----------------------------------------------------------------------------------


async def test_confirm_pins_trusts_and_records_when(store):
    result = await store.add_memory("oolong", key="tea", category="preferences", confidence=0.6)
    before = now_iso()
    confirmed = await store.confirm(result.memory.id)
    assert (confirmed.pinned, confirmed.confidence, confirmed.strength) == (True, 1.0, 1.0)
    assert confirmed.last_verified_at is not None and confirmed.last_verified_at >= before
    last = (await store.history(confirmed.id))[-1]
    assert (last.action, last.actor) == ("confirm", "user")
    assert last.old == {"pinned": 0, "confidence": 0.6, "last_verified_at": None}
    assert last.new == {
        "pinned": 1,
        "confidence": 1.0,
        "last_verified_at": confirmed.last_verified_at,
    }


async def test_confirm_refuses_what_is_not_a_current_fact(store):
    rule = (await store.add_memory("no emojis", kind="rule")).memory.id
    held = (await store.add_memory("tea", key="drink", status="held")).memory.id
    gone = await berlin(store, expires_at=iso(datetime.now(UTC) + timedelta(days=2)))
    await expire(store, gone)
    archived = (await store.add_memory("jazz", key="music")).memory.id
    await store.archive(archived)
    before = await memory_rows(store)
    for memory_id, needle in [
        (rule, "only a fact can be confirmed"),
        (held, "accept it from the review inbox"),
        (gone, "give it a new expiry first"),
        (archived, "restore it first"),
    ]:
        with pytest.raises(InvalidInput, match=needle):
            await store.confirm(memory_id)
    with pytest.raises(InvalidInput, match="no memory with id 999"):
        await store.confirm(999)
    assert await memory_rows(store) == before


async def test_the_fix_for_an_expired_fact_names_its_profile(tmp_path):
    async with await MemoryStore.open(tmp_path / "profiles" / "work" / "memory.db") as work:
        gone = await berlin(work, expires_at=iso(datetime.now(UTC) + timedelta(days=2)))
        await expire(work, gone)
        with pytest.raises(InvalidInput, match=f"edit {gone} --expires 7d --profile work,"):
            await work.confirm(gone)


# -- export and import --------------------------------------------------------------------------


async def test_export_carries_the_new_fields_and_old_files_still_import(store, tmp_path):
    ahead = iso(datetime.now(UTC) + timedelta(days=6))
    memory_id = await berlin(store, expires_at=ahead)
    confirmed = await store.confirm(memory_id)
    data = await store.export_data()
    [item] = data["memories"]
    assert (item["expires_at"], item["last_verified_at"]) == (ahead, confirmed.last_verified_at)
    assert "(expires " in await store.export_markdown()

    async with await MemoryStore.open(tmp_path / "copy.db") as copy:
        report = await copy.import_data(json.loads(json.dumps(data)))
        [imported] = [await copy.get(i) for i in report.new_ids]
        assert (imported.expires_at, imported.last_verified_at) == (
            ahead,
            confirmed.last_verified_at,
        )
        old = {  # written before facts could expire
            "format": "navi-memory",
            "version": 1,
            "memories": [{"id": 7, "kind": "fact", "key": "drink", "value": "oolong tea"}],
        }
        report = await copy.import_data(old)
        assert (await copy.get(report.new_ids[0])).expires_at is None
        bad = {**old, "memories": [{**old["memories"][0], "expires_at": "next week"}]}
        with pytest.raises(InvalidInput, match="expires_at must be an ISO 8601"):
            await copy.import_data(bad)


# -- extraction -------------------------------------------------------------------------------


def test_the_extraction_schema_offers_a_bounded_expiry():
    item = EXTRACTION_SCHEMA["properties"]["facts"]["items"]
    assert item["properties"]["expires_in_days"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 365,
    }
    assert item["properties"]["expires_on"]["maxLength"] == 10
    assert "expires_in_days" not in item["required"]
    assert unbounded_paths(EXTRACTION_SCHEMA) == []


async def test_extraction_proposes_an_expiry_counted_from_when_it_was_said(store, llm, fake):
    said = datetime.now(UTC) - timedelta(hours=30)
    session = await store.create_session("trip", at=iso(said))
    await store.save_message(session.id, "user", "I am in Berlin this week.", at=iso(said))
    await store.save_message(
        session.id, "user", "My last day at the office is 2031-03-31.", at=iso(said)
    )
    on_call = {**fact("location", "Berlin", "I am in Berlin this week"), "expires_in_days": 7}
    leaving = {
        **fact("last office day", "2031-03-31", "My last day at the office is 2031-03-31"),
        "expires_on": "2031-03-31",
    }
    fake.script(extraction([on_call, leaving]), profile("Works in an office."))
    from navi_desktop.pipeline.session_end import end_session

    report = await end_session(store, llm, session.id, SETTINGS)
    assert report.status == "processed", report.reason
    [row] = await facts_by_key(store, "location")
    assert row["expires_at"] == iso(said + timedelta(days=7))
    [row] = await facts_by_key(store, "last office day")
    assert parse_iso(row["expires_at"]).astimezone().date().isoformat() == "2031-04-01"
    # the model was told the chat's date, so "until Friday" can become a date
    material = prompt_of(chat_bodies(fake)[0])
    assert material.startswith(f"Chat ({said.astimezone():%A} {said.astimezone().date()}):")


async def test_a_fact_that_expired_before_it_was_learned_is_dropped(store, llm, fake):
    said = datetime.now(UTC) - timedelta(days=10)
    session = await store.create_session("old", at=iso(said))
    await store.save_message(session.id, "user", "I am on call this week.", at=iso(said))
    fake.script(
        extraction([{**fact("duty", "on call", "I am on call this week"), "expires_in_days": 7}])
    )
    from navi_desktop.pipeline.session_end import end_session

    report = await end_session(store, llm, session.id, SETTINGS)
    assert report.status == "processed"
    assert await facts_by_key(store, "duty") == []
    assert any("duty: on call: it stopped being true" in d for d in report.dropped)


@pytest.mark.parametrize(
    ("expiry", "reason"),
    [
        ({"expires_in_days": 3.5}, "expires_in_days is not a number of days from 1 to 365"),
        ({"expires_in_days": "soon"}, "expires_in_days is not a number of days"),
        ({"expires_in_days": True}, "expires_in_days is not a number of days"),
        ({"expires_on": "Friday"}, "expires_on is not a date (YYYY-MM-DD)"),
        ({"expires_on": 20310331}, "expires_on is not a date"),
    ],
)
async def test_a_malformed_expiry_drops_the_fact_with_its_reason(store, llm, fake, expiry, reason):
    _, report = await learn(
        store,
        llm,
        fake,
        [("user", "I am in Berlin this week."), ("user", "I like oolong tea.")],
        extraction(
            [
                {**fact("location", "Berlin", "I am in Berlin this week"), **expiry},
                fact("drink", "oolong tea", "I like oolong tea"),
            ]
        ),
        profile("Likes oolong tea."),
    )
    assert report.status == "processed", report.reason
    assert await facts_by_key(store, "location") == []  # not kept as a lasting fact
    assert [r["value"] for r in await facts_by_key(store, "drink")] == ["oolong tea"]
    assert any(reason in d for d in report.dropped), report.dropped


# -- the CLI ------------------------------------------------------------------------------------


def test_cli_add_with_an_expiry_then_confirm_edit_and_show(cli):
    code, out, err = cli("add", "--category", "profile", "--expires", "7d", "location", "Berlin")
    assert code == 0, err
    assert out.startswith("Added #1: user location: Berlin [expires ")
    code, out, _ = cli("--json", "show", "1")
    memory = json.loads(out)["memory"]
    expires = parse_iso(memory["expires_at"])
    assert timedelta(days=6, hours=23) < expires - datetime.now(UTC) <= timedelta(days=7)

    code, out, err = cli("confirm", "1")
    assert code == 0, err
    assert out.startswith("Confirmed #1: user location: Berlin [pinned, verified ")
    code, out, _ = cli("show", "1")
    assert "  expires      in 7 days (" in out and "  verified     20" in out
    assert "confirm" in out and "pinned: 0 -> 1" in out

    code, out, err = cli("edit", "1", "--expires", "never")
    assert code == 0, err
    code, out, _ = cli("--json", "show", "1")
    assert json.loads(out)["memory"]["expires_at"] is None


def test_cli_list_marks_an_expired_fact(cli, home):
    import asyncio

    cli("add", "--expires", "2d", "duty", "on call")

    async def pass_it() -> None:
        path = home / "data" / "profiles" / "alice" / "memory.db"
        async with await MemoryStore.open(path) as store:
            await expire(store, 1)

    asyncio.run(pass_it())
    _, out, _ = cli("list")
    assert "active,expired" in out
    _, out, _ = cli("search", "call")
    assert out.strip() == "No matches."


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("add", "--expires", "2020-01-01", "k", "v"), ("--expires 2020-01-01 is in the past",)),
        (("add", "--expires", "0d", "k", "v"), ("from 1 day to 3650 days", "'0d'")),
        (("add", "--expires=-3d", "k", "v"), ("from 1 day to 3650 days", "'-3d'")),
        (("add", "--expires", "100000d", "k", "v"), ("from 1 day to 3650 days",)),
        (("add", "--expires", "31/12/2030", "k", "v"), ("7d, 2w", "'31/12/2030'")),
        (("add", "--expires", "7", "k", "v"), ("needs a unit: 7d",)),
        (("add", "--kind", "rule", "--expires", "7d", "no emojis"), ("for facts only",)),
        (("edit", "1", "--expires", "yesterday"), ("--expires must be",)),
        (("edit", "1", "--expires", "7d", "--correct", "x"), ("not --expires",)),
        (("edit", "2", "--expires", "7d"), ("only a fact can expire",)),
        (("confirm", "2"), ("only a fact can be confirmed",)),
        (("confirm", "99"), ("no memory with id 99",)),
    ],
)
def test_cli_bad_expiry_or_confirm_is_one_line_and_writes_nothing(cli, args, needles):
    assert cli("add", "k", "v")[0] == 0
    assert cli("add", "--kind", "rule", "answer in French")[0] == 0

    def every() -> list[dict]:
        _, out, _ = cli("--json", "list", "--status", "all", "--sort", "id")
        return json.loads(out)["memories"]

    before = every()
    assert_user_error(cli(*args), *needles)
    assert every() == before
