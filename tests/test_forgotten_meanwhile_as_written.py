"""What is said before a forget and saved after it (a reply that streamed meanwhile, a tool's
result, the outbox of a machine that was away from the memory server)
arrives without what was forgotten, however it is written: punctuation inside the value (a
code, an e-mail address, "password: Hunter2!", a hyphenated name), another case, another
accent. Forgotten phrases are found by their words; before, the redaction looked for those
words with single spaces between them, so a value with punctuation inside was saved as it
was: in the transcript, its search index and the file."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from navi_desktop.errors import StorageUnavailable
from navi_desktop.memory.clock import iso
from navi_desktop.memory.matching import MARKER, Matcher
from navi_desktop.memory.outbox import Outbox
from navi_desktop.memory.pg import PgMemoryStore
from navi_desktop.memory.pg.buffered import BufferedStore
from navi_desktop.memory.store import MemoryStore
from tests.copies_support import holds, said_then_forgotten
from tests.pg_support import profile_name

# (the value forgotten, a text said before the forget, that text as saved, a word of the
# value that must be nowhere after: not in the text, its search index, or the file)
CASES = [
    pytest.param(
        "PELICAN-9439",
        "the key is under the Pelican-9439 stone",
        f"the key is under the {MARKER} stone",
        "pelican",
        id="code",
    ),
    pytest.param(
        "ana.silva@quuxmail.com",
        "write to Ana.Silva@QuuxMail.com today",
        f"write to {MARKER} today",
        "quuxmail",
        id="e-mail",
    ),
    pytest.param(
        "password: Hunter2!",
        "my PASSWORD: hunter2! was it",
        f"my {MARKER}! was it",
        "hunter2",
        id="password",
    ),
    pytest.param(
        "Zoë-Quillfeather",
        "ask ZOE-QUILLFEATHER or zoe\u0308-quillfeather",
        f"ask {MARKER} or {MARKER}",
        "quillfeather",
        id="accents",
    ),
]


@pytest.mark.parametrize(
    ("phrase", "text", "expected"),
    [
        pytest.param(
            "pelican 9439",
            "PELICAN — 9439, then pelican9439 and xpelican-9439",
            f"{MARKER}, then pelican9439 and xpelican-9439",  # whole words only
            id="punctuation",
        ),
        pytest.param(
            "ana silva example com", "mail ANA.Silva@Example.com.", f"mail {MARKER}.", id="e-mail"
        ),
        pytest.param(
            "zoe quillfeather",
            "Zoë\u00ad-Quillfeather_2 and Zoé Quillfeather",
            f"Zoë\u00ad-Quillfeather_2 and {MARKER}",  # "_" is inside a word, as in search
            id="accents",
        ),
        pytest.param("東 京 tower", "私は東京TOWERに", f"私は{MARKER}に", id="cjk"),
    ],
)
def test_a_phrase_matches_its_words_however_they_are_written(phrase, text, expected):
    """Whole words in order, anything but a word between them, as the phrases were hashed."""
    assert Matcher.of_phrases([phrase]).redact(text)[0] == expected


@pytest.mark.parametrize(("value", "text", "expected", "word"), CASES)
async def test_a_reply_saved_after_a_forget_is_saved_without_it(
    tmp_path: Path, value, text, expected, word
) -> None:
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path) as store:
        session, before = await said_then_forgotten(store, value)
        late = await store.save_message(
            session.id, "tool", text, meta={"arguments": {"said": text}}, said_at=before
        )
        assert late.content == expected
        assert late.meta == {"arguments": {"said": expected}}
        [_, saved] = await store.messages(session.id)
        assert (saved.content, saved.meta) == (expected, late.meta)
        assert await store.search(word, kinds=["message"]) == []
        indexed = f"SELECT count(*) FROM messages_fts WHERE messages_fts MATCH '\"{word}\"'"
        assert await store.db.scalar(indexed) == 0
    assert not holds(path, word, any_case=True)


class Server:
    """A memory server away until told otherwise (``away``), for a BufferedStore."""

    def __init__(self, dsn: str) -> None:
        self.dsn, self.name, self.away = dsn, profile_name(), True

    async def __call__(self) -> PgMemoryStore:
        if self.away:
            raise StorageUnavailable("memory server (test) is not reachable")
        return await PgMemoryStore.open(self.dsn, self.name)


@pytest.mark.parametrize("skew_s", [0.0, 180.0, -180.0])
@pytest.mark.parametrize(("value", "text", "expected", "word"), CASES)
async def test_the_outbox_replayed_after_a_forget_arrives_without_it(
    tmp_path: Path, pg_dsn: str, value, text, expected, word, skew_s, monkeypatch
) -> None:
    """A machine away from the memory server keeps a new session (its title) and a message;
    another forgets the value everywhere; the replay, said before, arrives without it. The
    first machine's clock minutes ahead or behind the other's changes nothing: no time of one
    is compared with the other's."""
    clock = lambda: iso(datetime.now(UTC) + timedelta(seconds=skew_s))  # noqa: E731
    monkeypatch.setattr("navi_desktop.memory.pg.buffered.now_iso", clock)
    server = Server(pg_dsn)

    laptop = BufferedStore(server, Outbox(tmp_path / "outbox.db"))  # type: ignore[arg-type]
    try:
        async with await PgMemoryStore.open(pg_dsn, server.name) as desktop:
            session = await laptop.create_session(title=f"about {text}")
            await laptop.save_message(session.id, "user", text, meta={"arguments": {"said": text}})
            assert await laptop.outbox.count() == 2
            added = (await desktop.add_memory(value, key="secret")).memory
            await desktop.forget(added.id)
            server.away = False
            assert await laptop.replay() == 2
            got = await desktop.get_session(session.id)
            [saved] = await desktop.messages(session.id)
            assert got.title == f"about {expected}"
            assert (saved.content, saved.meta) == (expected, {"arguments": {"said": expected}})
            assert await desktop.search(word, kinds=["message"]) == []
            async with desktop.db.reading():
                rows = await desktop.db.fetchall(
                    "SELECT content, meta::text AS meta FROM messages WHERE session_id = $1",
                    (session.id,),
                )
            assert word not in json.dumps([dict(r) for r in rows]).lower()
    finally:
        await laptop.close()


class Crash(Exception):
    """The daemon dying between the server's COMMIT and the outbox's crossing out."""


async def test_a_redacted_replay_cut_off_before_crossing_it_out_is_stored_once(
    tmp_path: Path, pg_dsn: str, monkeypatch
) -> None:
    """A replay that stored a message without a forgotten value and died before crossing it
    out sends it again on the next start: the copy already there is known by its time and
    its text as redacted, not stored a second time (it was: the text differs from the
    outbox's)."""
    server = Server(pg_dsn)

    laptop = BufferedStore(server, Outbox(tmp_path / "outbox.db"))  # type: ignore[arg-type]
    text = "the key is under the Pelican-9439 stone"
    expected = f"the key is under the {MARKER} stone"
    async with await PgMemoryStore.open(pg_dsn, server.name) as desktop:
        session = await laptop.create_session(title="keys")
        await laptop.save_message(session.id, "user", text)
        await desktop.forget((await desktop.add_memory("PELICAN-9439", key="secret")).memory.id)
        server.away = False

        crossing_out = laptop.outbox.done
        [_, said] = [row["seq"] for row in await laptop.outbox.pending()]

        async def dies(seq: int) -> None:  # the session is crossed out, the message not
            if seq == said:
                raise Crash
            await crossing_out(seq)

        monkeypatch.setattr(laptop.outbox, "done", dies)
        with pytest.raises(Crash):
            await laptop.replay()
        await laptop.close()
        monkeypatch.setattr(laptop.outbox, "done", crossing_out)
        again = BufferedStore(server, Outbox(tmp_path / "outbox.db"))  # type: ignore[arg-type]
        try:
            assert await again.replay() == 1
            assert [m.content for m in await desktop.messages(session.id)] == [expected]
        finally:
            await again.close()


@pytest.mark.parametrize("before", ["saved.\n", "É: ", "\t"])
async def test_a_value_only_the_meta_holds_is_found_in_the_text_it_stands_for(
    tmp_path: Path, before: str
) -> None:
    """The meta was looked at as JSON text, where escapes ("\\n", "\\u00c9", "\\t") glue a
    word to the one before: a tool's result "saved.\\n<value>" was saved as said."""
    async with await MemoryStore.open(tmp_path / "memory.db") as store:
        session, said = await said_then_forgotten(store, "PELICAN-9439")
        late = await store.save_message(
            session.id,
            "tool",
            "(the tool's result)",
            meta={"result": before + "PELICAN-9439"},
            said_at=said,
        )
        assert late.meta == {"result": before + MARKER}


def test_a_restore_finds_forgotten_words_inside_a_messages_meta(tmp_path: Path) -> None:
    """A restore looked for the words forgotten since the backup in the meta's JSON text, so
    a value after a "\\n" or with an escaped accent came back with the backup."""
    import asyncio

    from navi_desktop.memory.backup import make_backup
    from navi_desktop.memory.restore import restore_file

    values = ["the code is ZQXSECRÉT42", "the code is PELICAN-9439"]
    metas = [
        {"tool_call": {"name": "memory_save", "arguments": {"text": values[0]}}},
        {"tool_result": "saved.\n" + values[1]},
    ]
    path = tmp_path / "p" / "memory.db"

    async def build() -> None:
        async with await MemoryStore.open(path) as store:
            session = await store.create_session("chat")
            for meta in metas:
                await store.save_message(session.id, "assistant", "(a tool)", meta=meta)

    async def forget() -> None:
        async with await MemoryStore.open(path) as store:
            for value in values:
                await store.forget((await store.add_memory(value)).memory.id)

    asyncio.run(build())
    make_backup(path, tmp_path / "b.db")
    asyncio.run(forget())
    done = restore_file(tmp_path / "b.db", path)
    assert done.redacted_again >= 2
    assert not holds(path, "zqxsecr", any_case=True)
    assert not holds(path, "pelican", any_case=True)
