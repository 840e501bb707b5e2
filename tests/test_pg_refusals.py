"""The memory server refusing (not unreachable): a read-only standby, a statement_timeout
while another session holds a lock, a right revoked, a disk full, a NUL in a text. Each is
one line naming the cause and the fix (pg/refusals.py), never the driver's traceback; a chat
message typed meanwhile is kept (the outbox), or refused with ``stored`` false so the client
gives it back."""

from __future__ import annotations

import asyncio
import logging
import uuid

import asyncpg
import pytest

from navi_desktop.errors import InvalidInput, NaviError, StorageRefused, StorageUnavailable
from navi_desktop.memory import MemoryStore
from navi_desktop.memory.copy_profile import copy_profile
from navi_desktop.memory.outbox import Outbox
from navi_desktop.memory.pg import PgMemoryStore
from navi_desktop.memory.pg.buffered import BufferedStore
from navi_desktop.memory.pg.db import PgDatabase
from navi_desktop.memory.pg.refusals import refusal
from navi_desktop.memory.pg.schema import migrate
from tests.daemon_support import Peer
from tests.fake_ollama import FakeOllama, Reply
from tests.pg_support import as_role, profile_name, run_sql
from tests.pipeline_helpers import MODELS
from tests.test_daemon_postgres import Proxy, on_server, server_service

DSN = "postgresql://alice@db.example:5432/navi"


def one_line(exc: BaseException, *words: str) -> str:
    text = str(exc)
    assert isinstance(exc, NaviError), repr(exc)
    assert "\n" not in text and "Traceback" not in text
    for word in words:
        assert word in text, text
    return text


@pytest.mark.parametrize(
    ("error", "kind", "words"),
    [
        (asyncpg.ReadOnlySQLTransactionError, StorageUnavailable, ["read-only", "primary"]),
        (asyncpg.QueryCanceledError, StorageUnavailable, ["cancelled", "statement_timeout"]),
        (asyncpg.LockNotAvailableError, StorageUnavailable, ["cancelled", "lock"]),
        (asyncpg.AdminShutdownError, StorageUnavailable, ["closed the connection", "again"]),
        (asyncpg.CrashShutdownError, StorageUnavailable, ["closed the connection"]),
        (asyncpg.ConnectionFailureError, StorageUnavailable, ["closed the connection"]),
        (asyncpg.DiskFullError, StorageUnavailable, ["no disk space", "free space"]),
        (asyncpg.OutOfMemoryError, StorageUnavailable, ["out of memory"]),
        (asyncpg.TooManyConnectionsError, StorageUnavailable, ["no free connection"]),
        (asyncpg.SerializationError, StorageUnavailable, ["conflict", "try again"]),
        (asyncpg.DeadlockDetectedError, StorageUnavailable, ["conflict"]),
        (asyncpg.InsufficientPrivilegeError, StorageRefused, ["role alice", "GRANT"]),
        (asyncpg.CharacterNotInRepertoireError, InvalidInput, ["NUL"]),
        (asyncpg.UntranslatableCharacterError, InvalidInput, ["NUL"]),
        (asyncpg.InternalServerError, StorageRefused, ["SQLSTATE XX000", "server's log"]),
    ],
)
def test_each_refusal_is_one_line_naming_the_cause_and_the_fix(error, kind, words):
    made = refusal(error("the server's own words"), DSN)
    assert type(made) is kind
    one_line(made, "db.example", "the server's own words", "nothing of this change was kept")
    one_line(made, *words)
    assert made.sqlstate == error.sqlstate  # type: ignore[attr-defined]


async def _role(dsn: str, *settings: str) -> tuple[str, str]:
    """A login role of its own (``ALTER ROLE ... SET`` each of ``settings`` later) on a
    server whose schema the superuser made: (its name, its DSN)."""
    setup = await PgDatabase.connect(dsn, max_size=1)
    try:
        await migrate(setup)
    finally:
        await setup.close()
    name = f"r{uuid.uuid4().hex[:10]}"
    await run_sql(dsn, f"CREATE ROLE {name} LOGIN")
    return name, as_role(dsn, name)


def _cut(role: str) -> str:
    """Ends the role's sessions: a role's settings reach only its new connections."""
    return f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"


async def test_a_chat_on_a_read_only_server_keeps_the_message_and_sends_it_later(tmp_path, pg_dsn):
    role, dsn = await _role(pg_dsn)
    name = profile_name()
    async with FakeOllama(MODELS, default_reply=Reply("Noted.")) as fake:
        service = server_service(tmp_path, fake.url, dsn, name, [])
        try:
            first = await service.chat_send({"text": "before the failover"}, Peer())
            sid = first["session_id"]
            await run_sql(
                pg_dsn, f"ALTER ROLE {role} SET default_transaction_read_only = on", _cut(role)
            )
            # A read on a new connection: the server answers, and refuses only writes.
            assert (await service.status({}, Peer()))["profile_errors"] == {}
            during = await service.chat_send(
                {"text": "my passport number is ZX998877", "session_id": sid}, Peer()
            )
            assert during["reply"] == "Noted."
            # The server answers reads, yet the outbox waits: the status says why, not nothing.
            said = (await service.status({}, Peer()))["profile_errors"][name]["message"]
            one_line(StorageUnavailable(said), "read-only", "2 messages kept")
            outbox = next(tmp_path.rglob("outbox.db"))
            assert outbox.exists()
            store = await service.store(name)  # what the daemon's memory.add calls
            with pytest.raises(StorageUnavailable) as caught:
                await store.add_memory("a fact", source="user_explicit")
            one_line(caught.value, "read-only", "primary")

            await run_sql(pg_dsn, f"ALTER ROLE {role} RESET ALL", _cut(role))
            await service.retry_due()
            assert not outbox.exists()
        finally:
            await service.shutdown(budget_s=5)
    (said,) = await on_server(dsn, name, sid)
    assert ("user", "my passport number is ZX998877") in said


async def _ended_while_idle(link: Proxy, pg_dsn: str, role: str) -> None:
    """The server ends the role's sessions while they are idle, and each one's last words
    (FATAL 57P01) reach the client before its close does: the driver is then out of step with
    a connection it still takes for open."""
    link.closing.clear()
    before = link.ended
    await run_sql(pg_dsn, _cut(role))
    for _ in range(400):  # the server ends its side at once; bounded all the same
        if link.ended > before:
            break
        await asyncio.sleep(0.025)
    assert link.ended > before
    await asyncio.sleep(0.2)  # the last words read by the client, the close held back


async def test_a_session_the_server_ended_while_idle_is_one_line_and_connected_anew(
    tmp_path, pg_dsn
):
    role, role_dsn = await _role(pg_dsn)
    link = Proxy(role_dsn)
    await link.up()
    name = profile_name()
    try:
        async with await PgMemoryStore.open(link.dsn, name) as store:
            await store.add_memory("my bike is blue", source="user_explicit")
            await _ended_while_idle(link, pg_dsn, role)
            with pytest.raises(StorageUnavailable) as caught:
                await store.list_memories()
            one_line(caught.value, "closed the connection", "try again")
            listed, _ = await store.list_memories()  # on a new connection
            assert [m.value for m in listed] == ["my bike is blue"]
            link.closing.set()

        # A daemon tries again by itself: the user sees nothing of it.
        async with FakeOllama(MODELS, default_reply=Reply("Noted.")) as fake:
            service = server_service(tmp_path, fake.url, link.dsn, name, [])
            try:
                first = await service.chat_send({"text": "hello"}, Peer())
                await _ended_while_idle(link, pg_dsn, role)
                assert (await service.status({}, Peer()))["profile_errors"] == {}
                await service.chat_send(
                    {"text": "my locker is 42", "session_id": first["session_id"]}, Peer()
                )
                link.closing.set()
            finally:
                await service.shutdown(budget_s=5)
        (said,) = await on_server(role_dsn, name, first["session_id"])
        assert ("user", "my locker is 42") in said
    finally:
        link.closing.set()
        await link.down()


async def test_a_revoked_right_names_the_grant_and_the_chat_message_is_given_back(tmp_path, pg_dsn):
    role, dsn = await _role(pg_dsn)
    name = profile_name()
    async with FakeOllama(MODELS, default_reply=Reply("Noted.")) as fake:
        service = server_service(tmp_path, fake.url, dsn, name, [])
        try:
            first = await service.chat_send({"text": "hello"}, Peer())
            await run_sql(pg_dsn, f"REVOKE INSERT ON navi.messages FROM {role}, PUBLIC")
            try:
                with pytest.raises(StorageRefused) as caught:
                    await service.chat_send(
                        {"text": "my bike lock is 1234", "session_id": first["session_id"]},
                        Peer(),
                    )
            finally:
                await run_sql(pg_dsn, "GRANT INSERT ON navi.messages TO PUBLIC")
            one_line(caught.value, f"role {role}", "permission denied", "GRANT")
            # Not kept: the client gives the words back to be sent again.
            assert caught.value.navi_error_data["stored"] is False  # type: ignore[attr-defined]
        finally:
            await service.shutdown(budget_s=5)


async def test_a_statement_timeout_behind_a_lock_is_one_line(pg_dsn):
    role, dsn = await _role(pg_dsn)
    async with await PgMemoryStore.open(dsn, profile_name()) as store:
        await store.add_memory("my bike is blue", source="user_explicit")
    await run_sql(pg_dsn, f"ALTER ROLE {role} SET statement_timeout = '300ms'")
    holder = await asyncpg.connect(pg_dsn)
    try:
        async with await PgMemoryStore.open(dsn, profile_name()) as store:
            async with holder.transaction():
                await holder.execute("LOCK TABLE navi.memories IN ACCESS EXCLUSIVE MODE")
                with pytest.raises(StorageUnavailable) as caught:
                    await store.add_memory("my car is red", source="user_explicit")
            one_line(caught.value, "cancelled a statement", "statement_timeout")
            added = await store.add_memory("my car is red", source="user_explicit")
            assert added.memory.value == "my car is red"  # the same store works on
    finally:
        await holder.close()
        await run_sql(pg_dsn, f"ALTER ROLE {role} RESET ALL")


async def test_a_nul_in_a_text_is_stored_as_a_replacement_and_counted(tmp_path, pg_dsn):
    export = {
        "format": "navi-memory",
        "version": 1,
        "exported_at": "2026-11-28T01:11:10.672Z",
        "sessions": [],
        "memories": [
            {
                "id": 1,
                "kind": "fact",
                "value": "door code\x00 is 4321",
                "source": "user_explicit",
                "created_at": "2026-11-28T01:05:33.663Z",
                "updated_at": "2026-11-28T01:05:33.663Z",
                "valid_from": "2026-11-28T01:05:33.663Z",
            }
        ],
    }
    async with await PgMemoryStore.open(pg_dsn, profile_name()) as store:
        report = await store.import_data(export)
        assert (report.added, report.nuls_replaced) == (1, 1)
        # A key and evidence too, and a session's title: each NUL once, though the key's
        # normal form, the search document and the duplicate checks hold it again.
        more = {
            **export,
            "sessions": [{"id": "s1", "title": "a\x00b", "created_at": "2026-11-28T01:00:00Z"}],
            "memories": [
                {
                    **export["memories"][0],
                    "id": 2,
                    "key": "gate\x00code",
                    "value": "gate\x00code is\x00 9",
                    "evidence": "said\x00 so",
                    "session_id": "s1",
                }
            ],
        }
        report = await store.import_data(more)
        assert (report.added, report.nuls_replaced) == (1, 5)
        report = await store.import_data(more)  # all there already: nothing stored
        assert (report.added, report.skipped, report.nuls_replaced) == (0, 1, 0)
        listed, _ = await store.list_memories()
        assert sorted(m.value for m in listed) == [
            "door code\ufffd is 4321",
            "gate\ufffdcode is\ufffd 9",
        ]
        session = await store.create_session("a title\x00 with a NUL")
        said = await store.save_message(session.id, "user", "typed\x00 so")
        assert said.content == "typed\ufffd so"
        assert (await store.get_session(session.id)).title == "a title\ufffd with a NUL"

    async with await MemoryStore.open(tmp_path / "memory.db") as source:
        await source.import_data(export)
        kept = await source.create_session("old\x00 title")
        await source.save_message(kept.id, "user", "an old\x00 message")
        async with await PgMemoryStore.open(pg_dsn, profile_name()) as target:
            moved = await copy_profile(source, target)
            # Each as the file held it: not again for its search document or a look-up.
            assert moved.nuls_replaced == 3
            assert [m.content for m in await target.messages(kept.id)] == ["an old\ufffd message"]


async def test_a_value_the_server_cannot_take_is_one_line_naming_it(pg_dsn):
    async with await PgMemoryStore.open(pg_dsn, profile_name()) as store:
        with pytest.raises(InvalidInput) as caught:  # `navi memory show 99999999999999999999`
            await store.get(10**20)
        one_line(caught.value, "cannot take a value", "out of int64 range")
        assert (await store.add_memory("my bike is blue", source="user_explicit")).memory.id


WAIT_IN_TRIGGER = """
CREATE FUNCTION navi.test_wait() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(2);  -- the other side's order crossed: a deadlock
    PERFORM pg_advisory_xact_lock(1);
    RETURN NEW;
END $$;
CREATE TRIGGER test_wait BEFORE INSERT ON navi.{table} FOR EACH ROW
    EXECUTE FUNCTION navi.test_wait();
"""
UNDO_TRIGGER = "DROP TRIGGER test_wait ON navi.{table}; DROP FUNCTION navi.test_wait()"


async def _waiting(holder: asyncpg.Connection) -> int:
    """The backend waiting for advisory lock 1, once it waits (bounded)."""
    for _ in range(400):
        pid = await holder.fetchval(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = 1 AND NOT granted"
        )
        if pid:
            return pid
        await asyncio.sleep(0.025)
    raise AssertionError("no statement came to wait for the lock")


async def _buffered(tmp_path, pg_dsn: str, name: str) -> BufferedStore:
    async def opener() -> PgMemoryStore:
        return await PgMemoryStore.open(pg_dsn, name)

    return BufferedStore(opener, Outbox(tmp_path / "outbox.db"))


async def test_a_change_rolled_back_for_a_deadlock_is_tried_again_and_kept(
    tmp_path, pg_dsn, caplog
):
    caplog.set_level(logging.INFO, "navi_desktop.memory.pg.buffered")
    name = profile_name()
    store = await _buffered(tmp_path, pg_dsn, name)
    await store.add_memory("my bike is blue", source="user_explicit")  # the schema made
    holder = await asyncpg.connect(pg_dsn)
    await holder.execute(WAIT_IN_TRIGGER.format(table="memories"))
    try:
        await holder.execute("SET deadlock_timeout = '1min'")  # the store's side is chosen
        async with holder.transaction():
            await holder.execute("SELECT pg_advisory_xact_lock(1)")
            adding = asyncio.ensure_future(
                store.add_memory("my car is red", source="user_explicit")
            )
            await _waiting(holder)
            # Lock 2 is the store's: the server finds the deadlock and rolls the store's
            # transaction back (40P01), which BufferedStore tries again.
            await holder.execute("SELECT pg_advisory_xact_lock(2)")
        added = await adding
        assert added.memory.value == "my car is red"
    finally:
        await holder.execute(UNDO_TRIGGER.format(table="memories"))
        await holder.close()
    assert "add_memory tried again" in caplog.text and "deadlock" in caplog.text
    listed, _ = await store.list_memories()
    assert sorted(m.value for m in listed) == ["my bike is blue", "my car is red"]  # once
    await store.close()


async def test_a_message_cut_off_mid_save_is_kept_not_sent_twice(tmp_path, pg_dsn):
    """A connection lost while a message is saved is not tried again blindly (its COMMIT
    may have passed): the outbox keeps it, and its replay stores it once."""
    name = profile_name()
    store = await _buffered(tmp_path, pg_dsn, name)
    session = await store.create_session("a title")
    holder = await asyncpg.connect(pg_dsn)
    await holder.execute(WAIT_IN_TRIGGER.format(table="messages"))
    try:
        async with holder.transaction():
            await holder.execute("SELECT pg_advisory_xact_lock(1)")
            saving = asyncio.ensure_future(store.save_message(session.id, "user", "my pin is 4711"))
            await holder.execute("SELECT pg_terminate_backend($1)", await _waiting(holder))
        kept = await saving
        assert kept.id < 0 and await store.outbox.count() == 1  # in the outbox, not lost
    finally:
        await holder.execute(UNDO_TRIGGER.format(table="messages"))
        await holder.close()
    said = await store.messages(session.id)  # the outbox replayed first
    assert [m.content for m in said] == ["my pin is 4711"]
    assert await store.outbox.count() == 0
    await store.close()
