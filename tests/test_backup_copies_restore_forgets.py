"""A restore forgets again what the profile forgot after the backup was made. Before, `navi
memory backup --to ext.db; navi memory forget 1 --yes; navi memory restore --yes ext.db`
brought the forgotten memory back without a word, while an import of the same memory was
refused ("blocked (forgotten before)")."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from navi_desktop.memory.backup import make_backup
from navi_desktop.memory.matching import MARKER
from navi_desktop.memory.restore import restore_file
from navi_desktop.memory.store import MemoryStore
from tests.copies_support import holds
from tests.test_doctor_backup import db, values
from tests.test_profile_errors import half
from tests.tui_support import DEAD_HOST, Daemon, make_home

SECRET = "zorbquux"


async def _profile(path: Path, *, learned: bool = True) -> int | None:
    """ "likes tea", a session that says the secret, and (``learned``) its memory."""
    async with await MemoryStore.open(path) as store:
        await store.add_memory("likes tea")
        session = await store.create_session("chat")
        await store.save_message(session.id, "user", f"remember: the vault code is {SECRET}")
        if learned:
            return (await store.add_memory(f"the vault code is {SECRET}")).memory.id
    return None


async def _learn_and_forget(path: Path) -> None:
    async with await MemoryStore.open(path) as store:
        added = await store.add_memory(f"the vault code is {SECRET}")
        await store.forget(added.memory.id)


def test_a_restore_forgets_again_what_was_forgotten_after_the_backup(cli, home, tmp_path):
    memory_id = asyncio.run(_profile(db(home)))
    ext, old_export = tmp_path / "ext.db", tmp_path / "old.json"
    assert cli("backup", "--to", str(ext))[0] == 0
    assert cli("export", "-o", str(old_export))[0] == 0
    code, _, err = cli("forget", str(memory_id), "--yes")
    assert code == 0, err

    code, out, err = cli("--json", "restore", str(ext), "--yes")
    assert code == 0, err
    assert values(db(home)) == ["likes tea"]
    assert not holds(db(home), SECRET)  # nor in the file's free pages
    assert cli("forget", str(memory_id), "--yes")[0] != 0  # it is gone again
    done = json.loads(out)
    assert done["forgotten_again"] == 1 and done["redacted_again"] == 1, done
    assert done["memories"] == 1
    assert holds(ext, SECRET)  # the user's own file, as an export is: not Navi's to change
    # The tombstones came along: an old export cannot bring it back either.
    code, out, err = cli("import", str(old_export))
    assert code == 0, err
    assert "1 blocked (forgotten before)" in out
    assert values(db(home)) == ["likes tea"]


def test_words_forgotten_after_the_backup_go_where_their_memory_was_not_yet(tmp_path):
    """The backup holds the conversation, not yet the memory learned from it."""
    path = tmp_path / "profile" / "memory.db"
    asyncio.run(_profile(path, learned=False))
    ext = tmp_path / "ext.db"
    make_backup(path, ext)
    asyncio.run(_learn_and_forget(path))
    done = restore_file(ext, path)
    assert not holds(path, SECRET) and holds(ext, SECRET)
    assert (done.forgotten_again, done.redacted_again) == (0, 1)


def test_another_profile_s_backup_is_checked_against_this_one_s_forgets(tmp_path):
    """Its tombstones have another key: the memories are looked up by this file's key."""
    path, other = tmp_path / "mine" / "memory.db", tmp_path / "other" / "memory.db"
    asyncio.run(_learn_and_forget(path))
    asyncio.run(_profile(other))
    done = restore_file(other, path)
    assert values(path) == ["likes tea"] and not holds(path, SECRET)
    assert done.forgotten_again == 1 and done.not_compared is None


def test_a_damaged_current_file_is_restored_over_and_said_not_compared(tmp_path):
    path = tmp_path / "profile" / "memory.db"
    asyncio.run(_profile(path))
    ext = tmp_path / "ext.db"
    make_backup(path, ext)
    half(path)
    done = restore_file(ext, path)
    assert done.memories == 2 and done.forgotten_again == 0
    assert done.to_dict()["not_compared"].startswith(f"{path} could not be read (")


async def test_a_restore_through_the_daemon_forgets_again(tmp_path):
    paths = make_home(tmp_path, DEAD_HOST)
    path = paths.profile_db("tester")
    await _profile(path, learned=False)
    daemon = await Daemon(paths).start()
    try:
        added = await daemon.call("memory.add", {"args": [f"the vault code is {SECRET}"]})
        ext = tmp_path / "ext.db"
        await asyncio.to_thread(make_backup, path, ext)
        await daemon.call("memory.forget", {"args": [added["memory"]["id"]]})
        done = await daemon.call("profile.restore", {"file": str(ext)})
        assert (await daemon.call("memory.list"))["total"] == 1
        found = await daemon.call("memory.search", {"args": [SECRET]})
        assert SECRET not in json.dumps(found)
        assert done["forgotten_again"] == 1 and done["memories"] == 1, done
    finally:
        await daemon.stop()
    assert not holds(path, SECRET)


def test_the_restore_line_says_what_was_forgotten_again(cli, home, tmp_path):
    memory_id = asyncio.run(_profile(db(home)))
    ext = tmp_path / "ext.db"
    assert cli("backup", "--to", str(ext))[0] == 0
    assert cli("forget", str(memory_id), "--yes")[0] == 0
    code, out, err = cli("restore", str(ext), "--yes")
    assert code == 0, err
    assert "Forgotten again: 1 memory and 1 message forgotten since the backup." in out


def _restored_after_forgetting(path: Path, value: str) -> dict:
    """A backup of ``path`` made now, then ``value`` learned and forgotten in the profile,
    then the backup restored: what the restore did."""
    ext = path.parent.parent / "ext.db"
    make_backup(path, ext)

    async def forget() -> None:
        async with await MemoryStore.open(path) as store:
            added = (await store.add_memory(value, key="secret")).memory
            await store.forget(added.id)

    asyncio.run(forget())
    return restore_file(ext, path).to_dict()


@pytest.mark.parametrize(
    ("value", "text", "expected", "word"),  # word: of the text, nowhere in the file after
    [
        # The look for words forgotten since kept accents; forget and search fold them, so
        # "ZQXSECRÉT42" in the backup came back after "ZQXSECRET42" was forgotten.
        ("ZQXSECRET42", "accented ZQXSECR\u00c9T42 here", f"accented {MARKER} here", "T42"),
        # Found by their words, then looked for with single spaces between them: a value
        # with punctuation inside came back as it was.
        ("PELICAN-9439", "under the Pelican-9439 stone", f"under the {MARKER} stone", "Pelican"),
        ("ana.silva@quuxmail.com", "to Ana.Silva@QuuxMail.com", f"to {MARKER}", "QuuxMail"),
        ("password: Hunter2!", "my PASSWORD: hunter2! was it", f"my {MARKER}! was it", "hunter2"),
        ("Zoë-Quillfeather", "ask ZOE-QUILLFEATHER", f"ask {MARKER}", "QUILLFEATHER"),
    ],
)
def test_a_variant_in_the_backup_is_forgotten_again(tmp_path, value, text, expected, word):
    path = tmp_path / "profile" / "memory.db"

    async def said() -> str:
        async with await MemoryStore.open(path) as store:
            session = await store.create_session()
            await store.save_message(session.id, "user", text)
            return session.id

    async def messages(session_id: str) -> list[str]:
        async with await MemoryStore.open(path) as store:
            return [m.content for m in await store.messages(session_id)]

    session_id = asyncio.run(said())
    assert _restored_after_forgetting(path, value)["redacted_again"] == 1
    assert asyncio.run(messages(session_id)) == [expected]
    assert not holds(path, word)


def test_a_memory_in_the_backup_that_is_the_forgotten_words_goes_whole(tmp_path):
    """A memory whose value is the forgotten words written otherwise ("PELICAN/9439") is
    forgotten with them, as one with the forgotten value is: before, it came back as it was
    (and, its words once matched, would have been kept saying only "[forgotten]")."""
    path = tmp_path / "profile" / "memory.db"

    async def learned() -> None:
        async with await MemoryStore.open(path) as store:
            await store.add_memory("PELICAN/9439", key="stone")
            await store.add_memory("The boat is blue", key="boat")

    async def kept() -> list[str]:
        async with await MemoryStore.open(path) as store:
            return [m.value for m in (await store.list_memories())[0]]

    asyncio.run(learned())
    _restored_after_forgetting(path, "Pelican-9439")
    assert asyncio.run(kept()) == ["The boat is blue"]
    assert not holds(path, "PELICAN") and not holds(path, "9439")


def test_words_forgotten_since_that_only_the_profile_summary_holds_go_too(tmp_path):
    """The restore looked for forgotten words in memories, messages and titles only, where
    the forget's scrub also reaches the profile summary, entities and history: a phrase
    that only the backup's profile summary still held came back."""
    from navi_desktop.memory.store import MemoryStore

    path = tmp_path / "profile" / "memory.db"

    async def summarised() -> None:
        async with await MemoryStore.open(path) as store:
            await store.set_profile_summary("Parks at the ZQXSECRET42 garage.")

    async def forget() -> None:
        async with await MemoryStore.open(path) as store:
            gate = (await store.add_memory("ZQXSECRET42", key="garage")).memory
            await store.forget(gate.id)

    async def summary() -> str | None:
        async with await MemoryStore.open(path) as store:
            return (await store.profile_summary())[0]

    asyncio.run(summarised())
    ext = tmp_path / "ext.db"
    make_backup(path, ext)
    asyncio.run(forget())
    restore_file(ext, path)
    assert asyncio.run(summary()) == f"Parks at the {MARKER} garage."


def test_a_named_pipe_at_the_log_does_not_hang_the_restore(tmp_path: Path) -> None:
    """Looking for what the file forgot since the backup opened its log to check it, and a
    named pipe planted there blocked the restore (the doctor's fix) for good."""
    import os
    import threading

    path = tmp_path / "p" / "memory.db"

    async def profile() -> None:
        async with await MemoryStore.open(path) as store:
            await store.add_memory("likes tea")

    asyncio.run(profile())
    backup = tmp_path / "backup.db"
    make_backup(path, backup)
    wal = path.with_name("memory.db-wal")
    wal.unlink(missing_ok=True)
    os.mkfifo(wal)
    done: dict[str, object] = {}
    worker = threading.Thread(target=lambda: done.update(r=restore_file(backup, path)))
    worker.start()
    worker.join(30)
    if worker.is_alive():  # let it go before failing
        os.close(os.open(wal, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(5)
        pytest.fail("the restore hung on the named pipe")
    restored = done["r"]
    assert restored.memories == 1  # type: ignore[attr-defined]
    assert "named pipe" in (restored.not_compared or "")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "value", ["the vault code is ZQXSECRET42", "the vault code is ZQXSECRÉT42"]
)
def test_a_memory_forgotten_whole_spares_the_read_of_every_text(tmp_path, monkeypatch, value):
    """Its own forget in the copy reaches its words, so no text need be read for them; with
    an accent, the form without it (a forget buries both) kept every text being read."""
    import navi_desktop.memory.restore as restore

    read: list[str] = []
    texts = restore._texts

    async def counted(copy):
        async for text in texts(copy):
            read.append(text)
            yield text

    monkeypatch.setattr(restore, "_texts", counted)
    path = tmp_path / "p" / "memory.db"

    async def build() -> int:
        async with await MemoryStore.open(path) as store:
            session = await store.create_session("chat")
            for i in range(20):
                await store.save_message(session.id, "user", f"unrelated message {i}")
            return (await store.add_memory(value)).memory.id

    async def forget(memory_id: int) -> None:
        async with await MemoryStore.open(path) as store:
            await store.forget(memory_id)

    memory_id = asyncio.run(build())
    make_backup(path, tmp_path / "b.db")
    asyncio.run(forget(memory_id))
    done = restore_file(tmp_path / "b.db", path)
    assert done.forgotten_again == 1 and not holds(path, value.split()[-1])
    assert read == []
