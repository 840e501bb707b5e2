"""A forget made while a reply is under way reaches what the turn saves after it. The turn
saves its reply and its tool calls and results once the reply has streamed, after the
forget's scrub: before, those rows kept the forgotten text (in the transcript, its search
index and the file), whether the user forgot it from another window or asked the model to
forget it, which then quoted it in its own tool results. Through a real daemon."""

from __future__ import annotations

import asyncio
from pathlib import Path

from navi_desktop.memory import MemoryStore
from tests.copies_support import said_then_forgotten
from tests.fake_ollama import Reply
from tests.test_tui_inspector import add
from tests.tui_support import Daemon

SECRET = "ZQXSECRET42"


def bytes_kept(daemon: Daemon) -> int:
    """How often the secret is in the profile's file and its log, as bytes on disk."""
    db = daemon.paths.profile_db("tester")
    files = [Path(f"{db}{suffix}") for suffix in ("", "-wal")]
    return sum(f.read_bytes().count(SECRET.encode()) for f in files if f.exists())


async def transcript(daemon: Daemon, session_id: str) -> str:
    shown = await daemon.call("sessions.show", {"id": session_id})
    return "\n".join(f"{m['content']} {m.get('meta') or ''}" for m in shown["messages"])


async def test_the_model_forgetting_on_request_leaves_nothing_in_its_own_tool_results(
    daemon: Daemon, fake
) -> None:
    gate = await add(daemon, SECRET, key="gate code", category="profile")
    fake.script(
        Reply(tool_calls=[("memory_search", {"query": "gate code"})]),  # quotes the value
        Reply(tool_calls=[("memory_forget", {"id": gate["id"]})]),
        Reply("Done: I no longer know your gate code."),
    )
    sent = await daemon.call("chat.send", {"text": "Please forget my gate code."})
    said = await transcript(daemon, sent["session_id"])
    assert '"forgotten"' in said and "[forgotten]" in said  # the steps are there, redacted
    assert SECRET not in said
    found = await daemon.call("memory.search", {"args": [SECRET], "kwargs": {"kinds": ["message"]}})
    assert found == []
    assert bytes_kept(daemon) == 0


async def test_a_reply_streaming_while_the_user_forgets_is_saved_without_it(
    daemon: Daemon, fake
) -> None:
    gate = await add(daemon, SECRET, key="gate code", category="profile")
    words = f"Got it: your gate code is {SECRET} and I will keep it in mind for you."
    fake.script(Reply(words, delay=0.2))  # about 3 s of streaming
    turn = asyncio.create_task(
        daemon.call("chat.send", {"text": f"My gate code is {SECRET}, keep it."})
    )
    async with asyncio.timeout(30):
        while not fake.bodies():  # the reply has begun
            await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)
    await daemon.call("memory.forget", {"args": [gate["id"]]})
    # Still streaming: the reply is saved after the forget (else the forget's own scrub,
    # not the save, would have redacted it, and this would prove nothing).
    assert not turn.done()
    sent = await turn
    assert SECRET in sent["reply"]  # what the user saw as it streamed
    said = await transcript(daemon, sent["session_id"])
    assert SECRET not in said and "your gate code is [forgotten]" in said
    assert bytes_kept(daemon) == 0


async def test_what_is_said_after_a_forget_is_kept_as_said(tmp_path: Path) -> None:
    """Only what was forgotten after the message was made is redacted."""
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        session, before = await said_then_forgotten(store, SECRET, key="gate code")
        late = await store.save_message(
            session.id,
            "tool",
            f"code {SECRET}",
            meta={"arguments": {"value": SECRET}},
            said_at=before,
        )
        assert late.content == "code [forgotten]" and SECRET not in str(late.meta)
        again = await store.save_message(session.id, "user", f"my code is {SECRET} again")
        assert SECRET in again.content  # said after the forget: the user's to say
        said_later = await store.save_message(
            session.id, "assistant", f"noted, {SECRET}", said_at=again.created_at
        )
        assert SECRET in said_later.content


def plant_in_logs(state: Path) -> list[Path]:
    """Lines quoting the secret, as a model's failed answer would leave in the daemon's log."""
    state.mkdir(parents=True, exist_ok=True)
    logs = [state / "daemon.log", state / "daemon.log.1"]
    for log in logs:
        with log.open("a") as fh:
            fh.write(f"reflection left out (ungrounded): the gate code is {SECRET}\n")
    return logs


async def test_the_models_own_forget_scrubs_the_daemons_logs(daemon: Daemon, fake) -> None:
    """Before, only the memory.forget call scrubbed them; the model's tool did not."""
    logs = plant_in_logs(daemon.paths.state)
    gate = await add(daemon, SECRET, key="gate code", category="profile")
    fake.script(Reply(tool_calls=[("memory_forget", {"id": gate["id"]})]), Reply("Done."))
    await daemon.call("chat.send", {"text": "Please forget my gate code."})
    assert [SECRET in log.read_text() for log in logs] == [False, False]


def test_a_forget_on_the_file_scrubs_the_daemons_logs(cli, home: Path) -> None:
    """The CLI without the daemon (NAVI_DAEMON=off) forgot in the file only."""
    from navi_desktop.paths import Paths

    logs = plant_in_logs(Paths.from_env({"NAVI_HOME": str(home)}).state)
    assert cli("add", "gate code", SECRET)[0] == 0
    code, _, err = cli("forget", "1", "--yes")
    assert code == 0, err
    assert [SECRET in log.read_text() for log in logs] == [False, False]


async def test_an_accented_variant_said_during_the_turn_goes_too(tmp_path: Path) -> None:
    """Forget folds accents as search does; the look at what was forgotten meanwhile did
    not, so a reply saying "ZQXSECRÉT42" was saved as it was, and found by the value."""
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        session, before = await said_then_forgotten(store, SECRET, key="gate code")
        late = await store.save_message(
            session.id, "assistant", "it is ZQXSECR\u00c9T42", said_at=before
        )
        assert late.content == "it is [forgotten]"
        assert await store.search(SECRET, kinds=["message"]) == []
