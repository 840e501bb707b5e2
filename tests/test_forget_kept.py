"""The forget preview names the conversations a memory was learned in: a forget matches the
exact value, so what the user said there in other words stays. Both backends (``any_store``),
then the CLI's text and --json."""

from __future__ import annotations

import asyncio
import json
import shlex

SAID = "we finally moved into our flat by the river in Portugal's capital"
LEARNED = (
    "Learned in the session that starts \u201cwe finally moved into our flat by the river in"
    " Portugal's ca\u2026\u201d, 2 messages: other wordings of it there stay. Delete the session"
    " to remove them:"
)
LINE = f"{LEARNED} navi sessions delete s1 --profile alice"  # alice's profile, through the CLI


def delete(store, *ids: str) -> str:
    """The commands the preview gives: they name the profile when the store knows its name
    (a file where profiles live, or the server's profile), else the default would be hit."""
    where = f" --profile {store.profile}" if store.profile else ""
    return "; ".join(f"navi sessions delete {i}{where}" for i in ids)


async def _learned_in_s1(store, evidence: str | None = None):
    await store.create_session(session_id="s1")
    await store.save_message("s1", "user", SAID)
    await store.save_message("s1", "assistant", "Congratulations on the new flat!")
    added = await store.add_memory(
        "Lisbon", key="lives in", evidence=evidence, session_id="s1", source="conversation"
    )
    return added.memory


async def test_a_fact_names_the_session_it_was_learned_in(any_store):
    fact = await _learned_in_s1(any_store)
    preview = await any_store.forget_preview(fact.id)
    assert preview.kept == f"{LEARNED} {delete(any_store, 's1')}"
    assert preview.kept_sessions == [{"id": "s1", "title": None, "messages": 2}]

    await any_store.forget(fact.id)  # as the preview said: the user's own wording stays
    assert SAID in [m.content for m in await any_store.messages("s1")]


async def test_with_its_evidence_gone_other_wordings_still_stay(any_store):
    fact = await _learned_in_s1(any_store, evidence=SAID)
    await any_store.save_message("s1", "user", "the capital suits us")
    preview = await any_store.forget_preview(fact.id)
    assert "3 messages: other wordings of it there stay." in preview.kept
    await any_store.forget(fact.id)
    said = [m.content for m in await any_store.messages("s1")]
    assert SAID not in said and "the capital suits us" in said


async def test_every_session_of_its_versions_is_named_until_deleted(any_store):
    await _learned_in_s1(any_store)
    await any_store.create_session("Flat hunting", session_id="s2")
    await any_store.save_message("s2", "user", "we left for the north")
    porto = (
        await any_store.add_memory("Porto", key="lives in", session_id="s2", source="conversation")
    ).memory
    preview = await any_store.forget_preview(porto.id)
    assert len(preview.versions) == 1  # Lisbon goes with it, and so its session is named
    assert preview.kept.startswith(
        "Learned in \u201cFlat hunting\u201d, 1 message, and in the session that starts"
    )
    assert preview.kept.endswith(
        ": other wordings of it there stay. Delete those sessions to remove them:"
        f" {delete(any_store, 's2', 's1')}"
    )
    assert [s["id"] for s in preview.kept_sessions] == ["s2", "s1"]

    await any_store.delete_session("s1")  # a source deleted since: the rest still shows
    preview = await any_store.forget_preview(porto.id)
    assert preview.kept == (
        "Learned in \u201cFlat hunting\u201d, 1 message: other wordings of it there stay."
        f" Delete the session to remove them: {delete(any_store, 's2')}"
    )
    await any_store.delete_session("s2")
    preview = await any_store.forget_preview(porto.id)
    assert preview.kept is None and preview.kept_sessions == []


async def test_nothing_is_said_for_a_memory_added_by_hand_or_imported(any_store):
    await _learned_in_s1(any_store)  # a session exists, but these were not learned in it
    by_hand = (await any_store.add_memory("green tea", key="drink")).memory
    imported = (await any_store.add_memory("cycling", key="sport", source="import")).memory
    for memory in (by_hand, imported):
        preview = await any_store.forget_preview(memory.id)
        assert preview.kept is None and preview.kept_sessions == []


async def test_many_sessions_are_named_briefly_and_listed_in_full(any_store):
    for n in range(1, 5):  # a rule restated in four sessions, each a new version
        sid = f"trip {n}"  # an id that needs quoting in a shell
        await any_store.create_session(f"Trip {n}", session_id=sid)
        await any_store.save_message(sid, "user", f"no emojis please ({n})")
        rule = (
            await any_store.add_memory(
                f"no emojis, take {n}", kind="rule", key="emojis", session_id=sid
            )
        ).memory
    preview = await any_store.forget_preview(rule.id)
    assert preview.kept.startswith("Learned in \u201cTrip 4\u201d, 1 message, in \u201cTrip 3")
    assert ", and in 1 other session: other wordings of it there stay." in preview.kept
    assert preview.kept.endswith(delete(any_store, "'trip 4'", "'trip 3'", "'trip 2'"))
    assert [s["title"] for s in preview.kept_sessions] == [f"Trip {n}" for n in (4, 3, 2, 1)]


async def test_an_episode_lists_its_session_too(any_store):
    await any_store.create_session("Moving to Lisbon", session_id="s1")
    await any_store.save_message("s1", "user", "we may move")
    episode = (
        await any_store.add_memory("Planned a move.", kind="episode", session_id="s1")
    ).memory
    preview = await any_store.forget_preview(episode.id)
    assert preview.kept.startswith("The conversation it sums up stays:")
    assert preview.kept_sessions == [{"id": "s1", "title": "Moving to Lisbon", "messages": 1}]


# -- the CLI -------------------------------------------------------------------------------------


def _seed_learned_fact() -> tuple[int, int]:
    """A fact learned in session s1 and one added by hand, in alice's profile: their ids."""
    from navi_desktop.memory import MemoryStore
    from navi_desktop.paths import Paths

    async def seed() -> tuple[int, int]:
        async with await MemoryStore.open_profile("alice", paths=Paths.from_env()) as store:
            fact = await _learned_in_s1(store)
            tea = (await store.add_memory("green tea", key="drink")).memory
            return fact.id, tea.id

    return asyncio.run(seed())


def test_the_cli_preview_names_the_session_and_the_command(cli, home):
    fact, tea = _seed_learned_fact()
    code, out, _ = cli("forget", str(fact))  # no terminal: the preview, nothing forgotten
    assert code == 2
    assert LINE in out.splitlines()
    code, out, _ = cli("forget", str(tea))
    assert code == 2 and "Learned in" not in out and "sessions delete" not in out

    code, out, _ = cli("--json", "forget", str(fact))
    preview = json.loads(out)["preview"]
    assert preview["kept"] == LINE
    assert preview["kept_sessions"] == [{"id": "s1", "title": None, "messages": 2}]
    code, out, _ = cli("--json", "forget", str(tea))
    assert json.loads(out)["preview"]["kept_sessions"] == []


def test_the_command_given_deletes_the_session_in_that_profile(cli, home, capsys, monkeypatch):
    # The default profile has a session of the same id: a command without the profile would
    # delete that one and leave alice's, which is what the preview said it would remove.
    from navi_desktop.cli.main import run
    from navi_desktop.memory import MemoryStore
    from navi_desktop.paths import Paths, default_profile

    async def own_s1() -> None:
        async with await MemoryStore.open_profile(default_profile(), paths=Paths.from_env()) as s:
            await s.create_session(session_id="s1")
            await s.save_message("s1", "user", "the default profile's own conversation")

    fact, _ = _seed_learned_fact()
    asyncio.run(own_s1())
    _, out, _ = cli("--json", "forget", str(fact))
    command = json.loads(out)["preview"]["kept"].split("to remove them: ")[1]
    argv = shlex.split(command)
    assert argv[:3] == ["navi", "sessions", "delete"]
    capsys.readouterr()
    monkeypatch.setenv("NAVI_DAEMON", "on")  # sessions live in the daemon: let it start
    try:
        assert run(argv[1:]) == 0  # through the daemon it starts
    finally:
        run(["daemon", "stop"])  # not left running after the test

    async def sessions(profile: str) -> list[str]:
        async with await MemoryStore.open_profile(profile, paths=Paths.from_env()) as s:
            return [x.id for x in await s.list_sessions()]

    assert "s1" not in asyncio.run(sessions("alice"))
    assert "s1" in asyncio.run(sessions(default_profile()))
