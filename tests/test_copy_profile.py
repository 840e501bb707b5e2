"""Copying a profile between backends (``navi memory migrate``): a SQLite file to a real
PostgreSQL and back keeps everything but the ids, search finds the same things, forgotten
things stay forgotten, and a copy that cannot finish leaves nothing behind."""

from __future__ import annotations

import json
import os
import pathlib
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from navi_desktop.errors import InvalidInput
from navi_desktop.memory import MemoryStore
from navi_desktop.memory.copy_profile import TABLES, copy_profile
from navi_desktop.memory.ledger import Injection
from navi_desktop.memory.models import Signal
from navi_desktop.memory.vectors import int8_codes, sign_bits
from tests.fakes import BagOfWordsEmbedder
from tests.pg_support import profile_name

FORGOTTEN = "swordfish"


async def fill(store: MemoryStore) -> None:
    """A profile with something of every kind the copy must carry."""
    await store.create_session("Trip planning", session_id="s1", at="2024-03-01T10:00:00Z")
    await store.create_session(session_id="s2", at="2024-03-02T09:00:00Z")
    asked = await store.save_message("s1", "user", "I moved to Lisbon last spring")
    said = await store.save_message(
        "s1", "assistant", "Lisbon is lovely in spring!", meta={"model": "llama3.2"}
    )
    await store.save_message("s1", "tool", '{"ok": true}', name="remember")
    await store.save_message("s2", "user", "My sister Maria works at Acme Robotics")
    await store.mark_processed("s1", said.id)

    city = await store.add_memory(
        "Lisbon",
        category="profile",
        key="home city",
        evidence="I moved to Lisbon last spring",
        session_id="s1",
        message_from=asked.id,
        message_to=said.id,
        source="conversation",
        confidence=0.9,
    )
    await store.add_memory("Porto", category="profile", key="home city")
    newest = await store.add_memory("Braga", category="profile", key="home city")
    await store.add_memory("lisbon", category="preferences", key="favourite city")
    pinned = await store.add_memory("vim", category="technical", key="editor")
    await store.pin(pinned.memory.id)
    old = await store.add_memory("a Nokia 3310", category="other", key="phone")
    await store.archive(old.memory.id)
    await store.add_memory(
        "Acme Robotics",
        subject="Maria",
        key="employer",
        category="relationships",
        status="held",
        review_reason="sensitive",
    )
    await store.add_memory("answer in French", kind="rule")
    await store.add_memory(
        "Berlin",
        category="profile",
        key="current trip",
        expires_at=(datetime.now(UTC) + timedelta(days=30)).date().isoformat(),
    )
    secret = await store.add_memory(FORGOTTEN, category="other", key="diary password")
    await store.forget(secret.memory.id)

    await store.rename_entity("Maria", "Maria Silva")
    await store.save_model_entities({newest.memory.id: [("Braga", "location")]}, "test-model")
    await store.record_injections(
        "s1",
        asked.id,
        [Injection(city.memory.id, 1, 0.5, {"bm25": Signal(1, 2.5)}, "relevant")],
    )
    await store.rate_reply("s1", "up", message_id=said.id, note="helpful")
    await store.set_profile_summary("Lives in Braga, edits with vim.")
    await store.set_meta("last_reflection_fact_id", str(pinned.memory.id))
    await store.backfill_embeddings()


async def dump(store) -> dict[str, list]:
    """Every row of the profile with ids replaced by what they name (the position of a
    message or memory in id order, an entity's name), so two copies compare equal."""
    rows = {}
    async with store.db.reading():
        for table in TABLES:
            found = await store.db.fetchall(f"SELECT * FROM {table}")
            rows[table] = [
                {k: v for k, v in dict(r).items() if k not in ("user_id", "tsv")} for r in found
            ]
    msg = {r["id"]: i for i, r in enumerate(sorted(rows["messages"], key=lambda r: r["id"]))}
    mem = {r["id"]: i for i, r in enumerate(sorted(rows["memories"], key=lambda r: r["id"]))}
    ent = {r["id"]: r["norm"] for r in rows["entities"]}
    refs = {
        "memory_id": mem,
        "superseded_by": mem,
        "message_id": msg,
        "message_from": msg,
        "message_to": msg,
        "turn_id": msg,
        "entity_id": ent,
    }
    out = {}
    for table, found in rows.items():
        canon = []
        for r in found:
            r = dict(r)
            if table in ("messages", "memories"):
                r["id"] = (msg if table == "messages" else mem)[r["id"]]
            elif table == "entities":
                r["id"] = ent[r["id"]]
            else:
                r.pop("id", None)
            for column, ids in refs.items():
                if r.get(column) is not None:
                    r[column] = ids[r[column]]
            if table == "memory_history" and r["action"] in ("superseded", "supersedes"):
                r["new"] = {k: mem[v] for k, v in json.loads(r["new"]).items()}
            if table == "meta" and r["key"] == "last_reflection_fact_id":
                r["value"] = mem[int(r["value"])]
            if table == "embeddings":
                vector = r.pop("vector")
                if isinstance(vector, bytes):  # a file: the int8 copy and its sign bits
                    r["codes"], r["bits"] = vector, r.pop("bits")
                else:  # the server: float vectors, compared as the file would keep them
                    vec = np.asarray(vector.to_numpy(), dtype=np.float32)
                    r["codes"], r["bits"] = int8_codes(vec)[0].tobytes(), sign_bits(vec).tobytes()
            canon.append(repr(sorted(r.items())))
        out[table] = sorted(canon)
    out["meta"] = [m for m in out["meta"] if "pending_scrubs" not in m]
    return out


async def found(store, query: str, **kw) -> list[tuple[str, str, list[str]]]:
    return [(h.kind, h.text, sorted(h.signals)) for h in await store.search(query, **kw)]


@pytest.fixture
async def source(tmp_path):
    async with await MemoryStore.open(
        tmp_path / "source.db", embedder=BagOfWordsEmbedder()
    ) as store:
        await fill(store)
        yield store


@pytest.fixture
async def server(pg_dsn):
    from navi_desktop.memory.pg import PgMemoryStore

    async with await PgMemoryStore.open(
        pg_dsn, profile_name(), embedder=BagOfWordsEmbedder()
    ) as store:
        yield store


async def test_file_to_server_and_back_keeps_everything(source, server, tmp_path):
    before = await dump(source)
    assert before["tombstones"] and before["embeddings"] and before["entity_aliases"]
    assert before["entities_enriched"] and before["injections"] and before["reply_feedback"]

    there = await copy_profile(source, server)
    assert there.counts["memories"] == len(before["memories"])
    assert there.counts["embeddings"] == len(before["embeddings"])
    assert await dump(server) == before

    async with await MemoryStore.open(tmp_path / "back.db", embedder=BagOfWordsEmbedder()) as back:
        home = await copy_profile(server, back)
        assert home.counts == there.counts
        assert await dump(back) == before

        # The same things are found, by words and by meaning, on all three.
        for query, kw in [
            ("my home city", {}),
            ("Braga", {}),
            ("Lisbon spring", {"kinds": ["message"]}),
            ("vim editor", {}),
        ]:
            expected = await found(source, query, **kw)
            assert expected and await found(back, query, **kw) == expected
            on_server = await found(server, query, **kw)
            assert on_server[0][:2] == expected[0][:2], query
        assert "vector" in (await found(back, "my home city"))[0][2]

        # Versions, pins and history came along; the chain follows the new ids.
        current = [m for m in (await back.list_memories(kind="fact"))[0] if m.key == "home city"]
        assert [m.value for m in current] == ["Braga"]
        older = await back.versions(current[0].id)
        assert [m.value for m in older] == ["Porto", "Lisbon"]
        assert [h.action for h in await back.history(older[1].id)] == ["create", "superseded"]
        assert (await back.profile_summary())[0] == "Lives in Braga, edits with vim."

        # What was forgotten stays forgotten on both targets.
        for store in (server, back):
            assert await store.is_forgotten(FORGOTTEN, key="diary password")
            again = await store.add_memory(
                FORGOTTEN,
                category="other",
                key="diary password",
                source="conversation",
                actor="extraction",
            )
            assert again.action == "blocked"


async def test_a_target_that_is_not_empty_is_refused_and_unchanged(source, server, tmp_path):
    await server.add_memory("tea", category="preferences", key="drink")
    before = await dump(server)
    with pytest.raises(InvalidInput, match=r"is not empty \(1 memories"):
        await copy_profile(source, server)
    assert await dump(server) == before

    async with await MemoryStore.open(tmp_path / "other.db") as other:
        await other.create_session(session_id="mine")
        with pytest.raises(InvalidInput, match=f"{tmp_path / 'other.db'} is not empty"):
            await copy_profile(source, other)
        assert [s.id for s in await other.list_sessions()] == ["mine"]
        assert (await other.list_memories())[1] == 0


@pytest.fixture(params=["postgres", "sqlite"])
async def target(request, tmp_path):
    """An empty profile on each backend."""
    if request.param == "sqlite":
        opened = await MemoryStore.open(tmp_path / "target.db")
    else:
        from navi_desktop.memory.pg import PgMemoryStore

        opened = await PgMemoryStore.open(request.getfixturevalue("pg_dsn"), profile_name())
    async with opened as store:
        yield store


async def test_a_copy_that_fails_midway_leaves_the_target_empty(source, target, monkeypatch):
    from navi_desktop.memory import copy_server, copy_sides

    class Broken(Exception):
        pass

    async def broken(self, rows, source):  # after sessions, messages and memories
        raise Broken("the copy broke here")

    monkeypatch.setattr(copy_sides.SqliteSide, "insert_embeddings", broken)
    monkeypatch.setattr(copy_server.PgSide, "insert_embeddings", broken)
    empty = await dump(target)
    with pytest.raises(Broken):
        await copy_profile(source, target)
    assert await dump(target) == empty
    assert await target.list_sessions() == [] and (await target.list_memories())[1] == 0
    monkeypatch.undo()
    report = await copy_profile(source, target)  # nothing half-written stands in the way
    assert report.counts["embeddings"] > 0


# -- the command ---------------------------------------------------------------------------------


def test_migrate_without_a_server_names_the_setting(cli, monkeypatch):
    monkeypatch.delenv("NAVI_PG_DSN", raising=False)
    assert cli("add", "editor", "vim")[0] == 0
    code, out, err = cli("migrate", "--to", "postgres")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "[memory] dsn" in err and "NAVI_PG_DSN" in err


def test_migrate_to_the_server_and_back(cli, monkeypatch, pg_dsn, home):
    monkeypatch.setenv("NAVI_PG_DSN", pg_dsn)
    profile = profile_name()
    assert cli("add", "editor", "vim", profile=profile)[0] == 0
    assert cli("add", "--pin", "home_city", "Braga", profile=profile)[0] == 0
    code, out, err = cli("migrate", "--to", "postgres", profile=profile)
    assert code == 0, err
    assert "memories: 2" in out and 'backend = "postgres"' in out
    # The file stays; the server's copy is found there.
    monkeypatch.setenv("NAVI_HOME", str(home / "elsewhere"))
    code, out, err = cli("migrate", "--to", "sqlite", "--json", profile=profile)
    assert code == 0, err
    report = json.loads(out)
    assert report["counts"]["memories"] == 2 and report["setting"] == '[memory] backend = "sqlite"'
    code, out, _ = cli("list", "--json", profile=profile)
    assert sorted(m["value"] for m in json.loads(out)["memories"]) == ["Braga", "vim"]

    # A second copy into what now holds memories is refused, in both directions.
    code, _, err = cli("migrate", "--to", "sqlite", profile=profile)
    assert code == 2 and "is not empty (2 memories" in err and err.count("\n") == 1
    monkeypatch.setenv("NAVI_HOME", str(home))
    code, _, err = cli("migrate", "--to", "postgres", profile=profile)
    assert code == 2 and f"(profile {profile})" in err and "is not empty" in err


def test_migrate_is_refused_while_the_daemon_runs(pg_dsn):
    from tests.daemon_home import navi_home

    with navi_home() as h:
        pid = h.start()
        assert h.navi("memory", "add", "editor", "vim").returncode == 0  # through the daemon
        h.environ["NAVI_PG_DSN"] = pg_dsn
        line = h.refused("memory", "migrate", "--to", "postgres")
        assert f"daemon is running (pid {pid})" in line and "navi daemon stop" in line
        assert os.path.exists(h.paths.profile_db("tester"))
        assert pathlib.Path(h.lock).read_text().strip() == str(pid)  # its lock is untouched


async def test_file_to_file_never_gives_a_forgotten_memorys_id_again(source, tmp_path):
    async with source.db.reading():
        used = await source.db.scalar("SELECT seq FROM sqlite_sequence WHERE name = 'memories'")
        newest = await source.db.scalar("SELECT max(id) FROM memories")
    assert used > newest  # the newest memory was the forgotten one
    async with await MemoryStore.open(tmp_path / "copy.db") as copy:
        await copy_profile(source, copy)
        added = await copy.add_memory("green", category="preferences", key="colour")
        assert added.memory.id > used


def test_migrate_from_a_profile_the_server_lacks_creates_no_file(cli, monkeypatch, pg_dsn, home):
    monkeypatch.setenv("NAVI_PG_DSN", pg_dsn)
    profile = profile_name()
    code, out, err = cli("migrate", "--to", "sqlite", profile=profile)
    assert code == 2 and out == "" and err.count("\n") == 1 and f"no profile {profile!r}" in err
    assert not (home / "data" / "profiles" / profile).exists()
    assert not list(home.rglob("memory.db"))


# -- what can go wrong on the way ----------------------------------------------------------------


def _one_line(code: int, out: str, err: str) -> str:
    assert code in (1, 2) and out == "" and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def _on_server_only(cli, monkeypatch, pg_dsn: str, home) -> str:
    """A profile with one memory, copied to the server; NAVI_HOME then a fresh folder, so
    the way back starts with no file."""
    monkeypatch.setenv("NAVI_PG_DSN", pg_dsn)
    profile = profile_name()
    assert cli("add", "editor", "vim", profile=profile)[0] == 0
    assert cli("migrate", "--to", "postgres", profile=profile)[0] == 0
    monkeypatch.setenv("NAVI_HOME", str(home / "elsewhere"))
    return profile


async def _cut_connection(db, pg_dsn: str) -> None:
    """The server ends ``db``'s connection, as a server restart or a dropped link would."""
    import asyncpg

    pid = await db.scalar("SELECT pg_backend_pid()")
    admin = await asyncpg.connect(pg_dsn)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1, 5000)", pid)
    finally:
        await admin.close()


def test_migrate_to_a_file_that_fills_the_disk_leaves_no_file(cli, monkeypatch, pg_dsn, home):
    from navi_desktop.memory import copy_sides
    from navi_desktop.memory.failures import disk_full

    profile = _on_server_only(cli, monkeypatch, pg_dsn, home)

    original = copy_sides.SqliteSide.insert

    async def full(self, table, rows, **kw):  # the disk fills once the memories are written
        ids = await original(self, table, rows, **kw)
        if table == "memories":
            raise disk_full(self.store.db.path)
        return ids

    monkeypatch.setattr(copy_sides.SqliteSide, "insert", full)
    err = _one_line(*cli("migrate", "--to", "sqlite", profile=profile))
    assert "disk full" in err and "nothing of the copy was kept" in err and "migrate again" in err
    assert not (home / "elsewhere" / "data" / "profiles" / profile).exists()
    assert not list((home / "elsewhere").rglob("memory.db*"))
    monkeypatch.undo()
    monkeypatch.setenv("NAVI_PG_DSN", pg_dsn)
    monkeypatch.setenv("NAVI_HOME", str(home / "elsewhere"))
    code, out, err = cli("migrate", "--to", "sqlite", profile=profile)
    assert code == 0 and "memories: 1" in out, err


def test_migrate_refuses_a_target_file_that_is_a_symlink(cli, monkeypatch, pg_dsn, home):
    monkeypatch.setenv("NAVI_PG_DSN", pg_dsn)
    profile = profile_name()
    assert cli("add", "editor", "vim", profile=profile)[0] == 0
    assert cli("migrate", "--to", "postgres", profile=profile)[0] == 0
    path = home / "data" / "profiles" / profile / "memory.db"
    assert path.exists(), list(home.rglob("memory.db"))
    path.unlink()
    victim = home / "victim"
    victim.write_bytes(b"")
    path.symlink_to(victim)
    err = _one_line(*cli("migrate", "--to", "sqlite", profile=profile))
    assert f"{path} is a symbolic link" in err
    assert victim.read_bytes() == b"" and path.is_symlink()


def test_migrate_from_a_damaged_file_says_so_and_writes_nothing(cli, monkeypatch, pg_dsn, home):
    monkeypatch.setenv("NAVI_PG_DSN", pg_dsn)
    profile = profile_name()
    assert cli("add", "editor", "vim", profile=profile)[0] == 0
    path = home / "data" / "profiles" / profile / "memory.db"
    data = bytearray(path.read_bytes())
    data[:16] = b"not a sqlite fil"
    path.write_bytes(bytes(data))
    err = _one_line(*cli("migrate", "--to", "postgres", profile=profile))
    assert str(path) in err
    code, _, err = cli("migrate", "--to", "sqlite", profile=profile)
    assert code == 2 and f"no profile {profile!r}" in err  # nothing was made on the server


def test_migrate_when_the_server_goes_away_keeps_nothing(cli, monkeypatch, pg_dsn, home):
    from navi_desktop.memory import copy_server

    monkeypatch.setenv("NAVI_PG_DSN", pg_dsn)
    profile = profile_name()
    assert cli("add", "editor", "vim", profile=profile)[0] == 0
    original = copy_server.PgSide.insert

    async def gone(self, table, rows, **kw):  # the server ends this connection mid-copy
        if table == "memories":
            await _cut_connection(self.db, pg_dsn)
        return await original(self, table, rows, **kw)

    monkeypatch.setattr(copy_server.PgSide, "insert", gone)
    err = _one_line(*cli("migrate", "--to", "postgres", profile=profile))
    assert "closed the connection" in err and "nothing of the copy was kept" in err
    assert "retrying" not in err and "migrate again" in err
    monkeypatch.setattr(copy_server.PgSide, "insert", original)
    code, out, err = cli("migrate", "--to", "postgres", profile=profile)
    assert code == 0 and "memories: 1" in out, err


def test_migrate_from_a_server_that_goes_away_leaves_no_file(cli, monkeypatch, pg_dsn, home):
    from navi_desktop.memory import copy_server

    profile = _on_server_only(cli, monkeypatch, pg_dsn, home)
    original = copy_server.PgSide.fetchall

    async def gone(self, text, *args):  # the server ends this connection mid-read
        if "FROM memories" in text:
            await _cut_connection(self.db, pg_dsn)
        return await original(self, text, *args)

    monkeypatch.setattr(copy_server.PgSide, "fetchall", gone)
    err = _one_line(*cli("migrate", "--to", "sqlite", profile=profile))
    assert "nothing of the copy was kept" in err and "retrying" not in err
    assert not list((home / "elsewhere").rglob("memory.db*"))
    monkeypatch.setattr(copy_server.PgSide, "fetchall", original)
    code, out, err = cli("migrate", "--to", "sqlite", profile=profile)
    assert code == 0 and "memories: 1" in out, err
