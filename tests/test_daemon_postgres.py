"""The daemon with ``[memory] backend = "postgres"`` on a real server (pgserver): a whole
session learned into the server, two machines' daemons on one profile (a fact learned on one
reaches the other's clients as ``memory.changed``), and an outage of the server that loses
nothing a user typed (kept in a local outbox, replayed in order when the server is back)."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from navi_desktop.config import load_settings
from navi_desktop.daemon.service import Service
from navi_desktop.memory.pg import PgMemoryStore
from navi_desktop.paths import Paths
from tests.daemon_support import Peer
from tests.fake_ollama import FakeOllama, Reply
from tests.pg_support import profile_name
from tests.pipeline_helpers import MODELS, extraction, fact, profile


class QuickService(Service):
    def idle_seconds(self) -> float:
        return 0.3


class Proxy:
    """A TCP port that forwards to the server; ``down()`` is an outage (listener and every
    live connection cut), ``up()`` the server back on the same port; ``flowing.clear()`` a
    server that hangs (connections stay open, nothing comes back), ``flowing.set()`` it
    answering again; ``closing.clear()`` a link the server ended that reaches the client
    only as its last words, not yet as a close (counted in ``ended``)."""

    def __init__(self, target_dsn: str) -> None:
        parts = urlsplit(target_dsn)
        query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
        self.unix = query.get("host") if (query.get("host") or "").startswith("/") else None
        self.target = (parts.hostname, parts.port or 5432)
        self.user = parts.username or "postgres"
        self.database = parts.path.lstrip("/") or "postgres"
        self.port = 0
        self.server: asyncio.Server | None = None
        self.links: set[asyncio.StreamWriter] = set()
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.closing = asyncio.Event()
        self.closing.set()
        self.ended = 0

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"

    async def up(self) -> None:
        self.server = await asyncio.start_server(self._link, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        if self.server is None:
            return
        server, self.server = self.server, None
        server.close()
        for writer in list(self.links):
            writer.transport.abort()
        self.links.clear()
        await server.wait_closed()

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.unix:
            port = self.target[1]
            up_reader, up_writer = await asyncio.open_unix_connection(
                f"{self.unix}/.s.PGSQL.{port}"
            )
        else:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.links |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, back: bool) -> None:
            try:
                while data := await src.read(65536):
                    await self.flowing.wait()
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                if back:
                    self.ended += 1
                    await self.closing.wait()
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer, False), pipe(up_reader, writer, True))


@pytest.fixture
async def proxy(pg_dsn):
    """A proxy in front of the test server, up; after the test it answers again and is
    closed, whatever the test did to it."""
    link = Proxy(pg_dsn)
    await link.up()
    yield link
    link.flowing.set()
    link.closing.set()
    await link.down()


def server_service(
    home: Path, ollama_url: str, dsn: str, profile: str, sent: list, *, read_memory: bool = False
) -> Service:
    paths = Paths.from_env({"NAVI_HOME": str(home)})
    paths.config.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text(
        f'[ollama]\nhost = "{ollama_url}"\n[memory]\nembedder = "none"\nprofile = "{profile}"\n'
        f'backend = "postgres"\ndsn = "{dsn}"\n'
        f"[incognito]\nread_memory = {'true' if read_memory else 'false'}\n"
    )
    settings, errors = load_settings(paths.config_file)
    assert errors == []

    async def broadcast(topic, method, params):
        sent.append((topic, method, params))

    return QuickService(paths, settings, broadcast)


async def on_server(dsn: str, profile: str, *session_ids: str) -> list[list[tuple[str, str]]]:
    """Each session's messages as the server holds them: (role, content)."""
    async with await PgMemoryStore.open(dsn, profile, create=False) as check:
        return [[(m.role, m.content) for m in await check.messages(s)] for s in session_ids]


async def _until(check, seconds: float = 10.0):
    for _ in range(int(seconds / 0.05)):
        if value := await check():
            return value
        await asyncio.sleep(0.05)
    return await check()


async def test_a_session_is_learned_into_the_server(tmp_path, pg_dsn):
    name = profile_name()
    async with FakeOllama(MODELS) as fake:
        sent: list = []
        service = server_service(tmp_path, fake.url, pg_dsn, name, sent)
        try:
            fake.script(
                Reply("How interesting!"),
                extraction(
                    [fact("job", "marine biologist", "I work as a marine biologist")],
                    summary="The user talked about their job.",
                ),
                profile("The user is a marine biologist."),
            )
            result = await service.chat_send({"text": "I work as a marine biologist."}, Peer())
            assert result["reply"] == "How interesting!"
            store = await service.store(name)

            async def ended():
                return (await store.get_session(result["session_id"])).state == "ended"

            assert await _until(ended)
        finally:
            await service.shutdown(budget_s=5)
    # Read back over a connection of its own: it is on the server, not in a local file.
    async with await PgMemoryStore.open(pg_dsn, name, create=False) as check:
        facts, _ = await check.list_memories(kind="fact")
        assert [m.value for m in facts] == ["marine biologist"]
        said = await check.messages(result["session_id"])
        assert [m.role for m in said] == ["user", "assistant"]
    assert not list(tmp_path.rglob("memory.db"))  # nothing written to a local profile


async def test_a_fact_learned_on_one_machine_reaches_the_other(tmp_path, pg_dsn):
    name = profile_name()
    async with FakeOllama(MODELS) as fake:
        heard_a: list = []
        heard_b: list = []
        a = server_service(tmp_path / "laptop", fake.url, pg_dsn, name, heard_a)
        b = server_service(tmp_path / "desktop", fake.url, pg_dsn, name, heard_b)
        handlers_a = a.handlers()
        try:
            await b.store(name)  # B listens from its first use
            await (await b.store(name)).stats()
            added = await handlers_a["memory.add"](
                {"args": ["green tea"], "kwargs": {"key": "tea"}}, Peer()
            )
            new_id = added["memory"]["id"]

            async def heard():
                return [p for _, m, p in heard_b if m == "memory.changed" and new_id in p["ids"]]

            notes = await _until(heard)
            assert notes and notes[0]["profile"] == name
            got = await (await b.store(name)).get(new_id)
            assert got.value == "green tea"
        finally:
            await a.shutdown(budget_s=5)
            await b.shutdown(budget_s=5)


async def test_typing_goes_on_through_an_outage_and_nothing_is_lost(tmp_path, pg_dsn, proxy):
    name = profile_name()
    async with FakeOllama(MODELS, default_reply=Reply("Noted.")) as fake:
        sent: list = []
        service = server_service(tmp_path, fake.url, proxy.dsn, name, sent)
        try:
            first = await service.chat_send({"text": "before the outage"}, Peer())
            sid = first["session_id"]
            await proxy.down()

            # The server is gone: the turn still answers, and what was typed is kept locally.
            during = await service.chat_send(
                {"text": "my locker code is 4711", "session_id": sid}, Peer()
            )
            assert during["reply"] == "Noted."
            fresh = await service.chat_send({"text": "a new chat while away"}, Peer())
            outbox = next(tmp_path.rglob("outbox.db"))
            assert stat.S_IMODE(outbox.stat().st_mode) == 0o600
            for folder in outbox.relative_to(tmp_path).parents:  # data/profiles/<name>
                if folder.parts:
                    assert stat.S_IMODE((tmp_path / folder).stat().st_mode) == 0o700, folder
            status = await service.status({}, Peer())
            problem = status["profile_errors"][name]["message"]
            assert "not reachable" in problem and "4 messages kept on this machine" in problem
            shown = await service.sessions_show({"id": sid}, Peer())
            assert "my locker code is 4711" in [m["content"] for m in shown["messages"]]

            await proxy.up()
            await service.retry_due()
            assert not outbox.exists()  # sent, and no copy left behind
            assert (await service.status({}, Peer()))["profile_errors"] == {}
        finally:
            await service.shutdown(budget_s=5)

    said, later = await on_server(pg_dsn, name, sid, fresh["session_id"])
    assert said == [
        ("user", "before the outage"),
        ("assistant", "Noted."),
        ("user", "my locker code is 4711"),
        ("assistant", "Noted."),
    ]
    assert later == [("user", "a new chat while away"), ("assistant", "Noted.")]


async def first_turn_then_freeze(service: Service, proxy, profile: str) -> str:
    """A first turn while the server answers, with the profile's store and change feed open;
    then the server stops answering (the proxy holds every byte). The session's id."""
    first = await service.chat_send({"text": "before it hung"}, Peer())
    await service.store(profile)
    proxy.flowing.clear()
    return first["session_id"]


async def test_a_server_that_stops_answering_does_not_hang_a_turn(
    tmp_path, pg_dsn, proxy, monkeypatch
):
    from navi_desktop.memory.pg import buffered

    monkeypatch.setattr(buffered.BufferedStore, "ANSWER_S", 1.0)
    name = profile_name()
    async with FakeOllama(MODELS, default_reply=Reply("Noted.")) as fake:
        service = server_service(tmp_path, fake.url, proxy.dsn, name, [])
        try:
            sid = await first_turn_then_freeze(service, proxy, name)
            # The turn waits for the server once, ANSWER_S: not once per call, and not for the
            # driver's clean-up of the cancelled query (a minute, through a frozen server).
            during = await asyncio.wait_for(
                service.chat_send({"text": "typed while it hung", "session_id": sid}, Peer()),
                5,
            )
            assert during["reply"] == "Noted."
            store = await service.store(name)
            assert len(store.given_up) == 1  # one call given up on; the rest not tried
            status = await service.status({}, Peer())
            problem = status["profile_errors"][name]["message"]
            assert "did not answer" in problem and "\n" not in problem

            proxy.flowing.set()
            await asyncio.wait_for(service.retry_due(), 120)
            assert not list(tmp_path.rglob("outbox.db"))
        finally:
            proxy.flowing.set()
            await service.shutdown(budget_s=5)
    [said] = await on_server(pg_dsn, name, sid)
    assert said == [
        ("user", "before it hung"),
        ("assistant", "Noted."),
        ("user", "typed while it hung"),
        ("assistant", "Noted."),
    ]


async def send_what_was_kept(home: Path, ollama_url: str, dsn: str, profile: str) -> None:
    """A next daemon's start: its recovery replays what the outbox kept."""
    again = server_service(home, ollama_url, dsn, profile, [])
    try:
        await again.recover()
        assert not list(home.rglob("outbox.db"))
    finally:
        await again.shutdown(budget_s=5)


async def test_a_server_frozen_before_the_first_turn_costs_the_turn_one_wait(
    tmp_path, pg_dsn, proxy, monkeypatch
):
    """Connecting gives up (after the pool's 5 s) before ANSWER_S: that failure, a wait and
    not a refusal, spares the turn's other calls too (each waited its own 5 s before)."""
    from navi_desktop.memory.pg import buffered

    monkeypatch.setattr(buffered.BufferedStore, "ANSWER_S", 30.0)
    name = profile_name()
    proxy.flowing.clear()
    async with FakeOllama(MODELS, default_reply=Reply("Noted.")) as fake:
        service = server_service(tmp_path, fake.url, proxy.dsn, name, [])
        try:
            turn = service.chat_send({"text": "typed while it hung"}, Peer())
            assert (await asyncio.wait_for(turn, 9))["reply"] == "Noted."
            listed = service.handlers()["memory.list"]({"args": [], "kwargs": {}}, Peer())
            with pytest.raises(Exception) as caught:  # the inspector's read: no wait either
                await asyncio.wait_for(listed, 1)
            assert "not reachable" in str(caught.value)
        finally:
            proxy.flowing.set()
            await service.shutdown(budget_s=2)


async def test_a_server_that_stops_answering_does_not_hold_up_the_daemons_stop(
    tmp_path, pg_dsn, proxy, monkeypatch
):
    from navi_desktop.memory.pg import buffered, db, store

    monkeypatch.setattr(buffered.BufferedStore, "ANSWER_S", 1.0)
    for module, name in ((db, "RELEASE_S"), (db, "CLOSE_S"), (store, "CLOSE_S")):
        monkeypatch.setattr(module, name, 1.0)
    name = profile_name()
    async with FakeOllama(MODELS, default_reply=Reply("Noted.")) as fake:
        service = server_service(tmp_path, fake.url, proxy.dsn, name, [])
        try:
            sid = await first_turn_then_freeze(service, proxy, name)
            await service.chat_send({"text": "typed while it hung", "session_id": sid}, Peer())
            # A session ended now asks the server first (its claim): refused at once, and
            # left pending, rather than waiting on it (an end already under way when the
            # server froze waits out the statement's bound, pg/db.py QUERY_S).
            fresh = await service.chat_send({"text": "a new chat while it hung"}, Peer())
            ended = await asyncio.wait_for(service.end(name, fresh["session_id"], "idle"), 5)
            assert ended.status == "pending" and "did not answer" in ended.reason
            # The open session's end, cancelled queries and closing connections all wait on
            # the frozen server: each is bounded, so the stop is too (it waited forever).
            await asyncio.wait_for(service.shutdown(budget_s=1), 15)
        finally:
            proxy.flowing.set()
        await send_what_was_kept(tmp_path, fake.url, proxy.dsn, name)
    said, later = await on_server(pg_dsn, name, sid, fresh["session_id"])
    assert [content for _, content in said] == [
        "before it hung",
        "Noted.",
        "typed while it hung",
        "Noted.",
    ]
    assert [content for _, content in later] == ["a new chat while it hung", "Noted."]


async def test_a_statement_the_server_never_answers_fails_in_one_line(proxy, monkeypatch):
    from navi_desktop.errors import StorageUnavailable
    from navi_desktop.memory.pg import db

    monkeypatch.setattr(db, "RELEASE_S", 1.0)
    monkeypatch.setattr(db, "CLOSE_S", 1.0)
    pool = await db.PgDatabase.connect(proxy.dsn, query_s=1.0)
    async with pool.reading():
        assert await pool.scalar("SELECT 1") == 1
    proxy.flowing.clear()

    async def frozen_read():
        async with pool.transaction():  # its ROLLBACK waits on the server too
            return await pool.scalar("SELECT 2")

    with pytest.raises(StorageUnavailable) as caught:
        await asyncio.wait_for(frozen_read(), 15)  # unbounded before: forever
    assert "did not answer" in str(caught.value) and "\n" not in str(caught.value)
    await asyncio.wait_for(pool.close(), 15)


async def test_an_outbox_left_by_a_stopped_daemon_is_sent_by_the_next(tmp_path, pg_dsn, proxy):
    name = profile_name()
    async with FakeOllama(MODELS, default_reply=Reply("Noted.")) as fake:
        service = server_service(tmp_path, fake.url, proxy.dsn, name, [])
        await proxy.down()
        try:
            kept = await service.chat_send({"text": "typed while the server was down"}, Peer())
        finally:
            await service.shutdown(budget_s=2)
        await proxy.up()
        await send_what_was_kept(tmp_path, fake.url, proxy.dsn, name)
    [said] = await on_server(pg_dsn, name, kept["session_id"])
    assert [content for _, content in said] == ["typed while the server was down", "Noted."]


async def test_no_server_named_is_one_line_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.delenv("NAVI_PG_DSN", raising=False)
    paths = Paths.from_env({"NAVI_HOME": str(tmp_path)})
    paths.config.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text('[memory]\nembedder = "none"\nbackend = "postgres"\n')
    settings, errors = load_settings(paths.config_file)
    assert errors == []

    async def broadcast(*_):
        return None

    service = Service(paths, settings, broadcast)
    try:
        store = await service.store("me")
        with pytest.raises(Exception) as caught:
            await store.stats()
        text = str(caught.value)
        assert "\n" not in text and "NAVI_PG_DSN" in text and "pgserver" in text
    finally:
        await service.shutdown(budget_s=1)


async def test_incognito_reads_the_server_and_writes_nothing_there(tmp_path, pg_dsn):
    import asyncpg

    name = profile_name()
    async with FakeOllama(MODELS, default_reply=Reply("You like green tea.")) as fake:
        service = server_service(tmp_path, fake.url, pg_dsn, name, [], read_memory=True)
        handlers = service.handlers()
        try:
            await handlers["memory.add"]({"args": ["green tea"], "kwargs": {"key": "tea"}}, Peer())
            conn = await asyncpg.connect(pg_dsn)
            counts = (
                "SELECT (SELECT count(*) FROM navi.sessions s JOIN navi.users u"
                "        ON u.id = s.user_id WHERE u.profile = $1),"
                "       (SELECT count(*) FROM navi.messages m JOIN navi.users u"
                "        ON u.id = m.user_id WHERE u.profile = $1),"
                "       (SELECT count(*) FROM navi.injections i JOIN navi.users u"
                "        ON u.id = i.user_id WHERE u.profile = $1)"
            )
            before = tuple(await conn.fetchrow(counts, name))
            reply = await service.chat_send(
                {"text": "Which tea do I like?", "incognito": True}, Peer()
            )
            assert reply["reply"] == "You like green tea."
            asked = fake.bodies()[-1]["messages"][0]["content"]
            assert "green tea" in asked  # read from the server
            assert tuple(await conn.fetchrow(counts, name)) == before == (0, 0, 0)
            await conn.close()
        finally:
            await service.shutdown(budget_s=2)


async def test_a_session_end_is_processed_by_one_daemon_at_a_time(pg_dsn):
    name = profile_name()
    async with (
        await PgMemoryStore.open(pg_dsn, name) as laptop,
        await PgMemoryStore.open(pg_dsn, name) as desktop,
    ):
        sid = (await laptop.create_session()).id
        async with laptop.processing(sid) as first:
            async with desktop.processing(sid) as second:
                assert (first, second) == (True, False)
            async with desktop.processing("another") as other:
                assert other  # only that session is taken
        async with desktop.processing(sid) as after:
            assert after  # let go when the first was done


async def test_using_a_memory_in_a_reply_is_no_news_to_the_other_machine(pg_dsn):
    name = profile_name()
    async with (
        await PgMemoryStore.open(pg_dsn, name) as laptop,
        await PgMemoryStore.open(pg_dsn, name) as desktop,
    ):
        from navi_desktop.memory.pg.store import watch_changes

        heard: list[int] = []
        feed = await watch_changes(desktop, heard.append)
        try:
            fact = (await laptop.add_memory("green tea", key="tea")).memory
            edited = await laptop.pin(fact.id)
            await laptop.touch([fact.id])  # put into a prompt: used, not changed
            marker = (await laptop.add_memory("black coffee", key="coffee")).memory

            async def both():
                return heard if marker.id in heard else None

            assert await _until(both)
            assert heard == [fact.id, edited.id, marker.id]
        finally:
            await feed.close()


async def test_a_delete_or_forget_after_an_outage_is_not_undone_by_the_outbox(
    tmp_path, pg_dsn, proxy
):
    """What the outbox kept reaches the server before a delete or a forget runs there: sent
    after, it brought a deleted session back, and a forgotten value with it."""
    name = profile_name()
    async with FakeOllama(MODELS, default_reply=Reply("Noted.")) as fake:
        service = server_service(tmp_path, fake.url, proxy.dsn, name, [])
        handlers = service.handlers()
        try:
            kept = await service.chat_send({"text": "my diary starts here"}, Peer())
            doomed = await service.chat_send({"text": "a chat I will delete"}, Peer())
            added = await handlers["memory.add"]({"args": ["I moved to Lisbon"]}, Peer())
            await proxy.down()
            for sid, text in [
                (doomed["session_id"], "my locker code is 4711"),
                (kept["session_id"], "I moved to Lisbon, and today was sunny"),
            ]:
                await service.chat_send({"text": text, "session_id": sid}, Peer())
            assert next(tmp_path.rglob("outbox.db")).exists()
            await proxy.up()

            await service.sessions_delete({"id": doomed["session_id"]}, Peer())
            forget = {"args": [added["memory"]["id"]], "kwargs": {"scope": "everywhere"}}
            await handlers["memory.forget"](forget, Peer())
            await service.retry_due()
            assert not list(tmp_path.rglob("outbox.db"))
        finally:
            await service.shutdown(budget_s=5)

    async with await PgMemoryStore.open(pg_dsn, name, create=False) as check:
        sessions = {s.id for s in await check.list_sessions()}
        assert doomed["session_id"] not in sessions and kept["session_id"] in sessions
        said = [m.content for m in await check.messages(kept["session_id"])]
    assert "my diary starts here" in said
    assert not any("moved to Lisbon" in text or "4711" in text for text in said), said


async def test_what_the_outbox_kept_arrives_without_a_value_forgotten_meanwhile_elsewhere(
    tmp_path, pg_dsn, proxy
):
    """A laptop away from the server keeps what its user types; meanwhile the desktop forgets
    a value everywhere. The laptop's replay, said before that forget, arrives without it;
    what is said after the forget is kept as said."""
    name = profile_name()
    async with FakeOllama(MODELS, default_reply=Reply("Noted.")) as fake:
        laptop = server_service(tmp_path / "laptop", fake.url, proxy.dsn, name, [])
        desktop = server_service(tmp_path / "desktop", fake.url, pg_dsn, name, [])
        try:
            first = await laptop.chat_send({"text": "hello from the laptop"}, Peer())
            sid = first["session_id"]
            added = await desktop.handlers()["memory.add"](
                {"args": ["the vault code is zorbquux"]}, Peer()
            )
            await proxy.down()
            await laptop.chat_send(
                {"text": "note: the vault code is zorbquux, keep it", "session_id": sid}, Peer()
            )
            forget = {"args": [added["memory"]["id"]], "kwargs": {"scope": "everywhere"}}
            await desktop.handlers()["memory.forget"](forget, Peer())
            await desktop.chat_send({"text": "the vault code is zorbquux again"}, Peer())
            await proxy.up()
            await laptop.retry_due()
            assert not list((tmp_path / "laptop").rglob("outbox.db"))
        finally:
            await laptop.shutdown(budget_s=5)
            await desktop.shutdown(budget_s=5)

    (said,) = await on_server(pg_dsn, name, sid)
    assert ("user", "note: [forgotten], keep it") in said, said
    async with await PgMemoryStore.open(pg_dsn, name, create=False) as check:
        later = [m.content for s in await check.list_sessions() for m in await check.messages(s.id)]
    assert "the vault code is zorbquux again" in later  # said after the forget: kept
