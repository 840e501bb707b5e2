"""Shared fixtures: the fake Ollama on loopback, the real backend against it, a real store
file, and a real daemon. Modules that need other versions define their own."""

from __future__ import annotations

import pytest

from navi_desktop.memory.store import MemoryStore
from tests.fake_ollama import FakeOllama
from tests.pipeline_helpers import MODELS, make_backend


@pytest.fixture(autouse=True)
def _plain_terminal(monkeypatch):
    """Colour settings in the environment change what the app draws (and its snapshots)."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)


@pytest.fixture
def snap_compare(snap_compare):
    """pytest-textual-snapshot's, with every widget on every screen drawn again whole just
    before the picture. Under load a widget is sometimes drawn in parts (a field a key
    changed goes first, tui/frames.py), which can leave one run of a colour as two
    rectangles: the same picture, a different SVG (a dialog snapshot failed 1 run in 3)."""

    def compare(app, *args, run_before=None, **kwargs):
        async def before(pilot):
            if run_before is not None:
                await run_before(pilot)
            for screen in pilot.app.screen_stack:
                for widget in screen.walk_children():
                    widget.refresh()
            await pilot.pause()

        return snap_compare(app, *args, run_before=before, **kwargs)

    return compare


@pytest.fixture
async def fake():
    async with FakeOllama(MODELS) as server:
        yield server


@pytest.fixture
async def llm(fake):
    async with make_backend(fake) as backend:
        yield backend


@pytest.fixture
async def store(tmp_path):
    async with await MemoryStore.open(tmp_path / "memory.db") as s:
        yield s


@pytest.fixture
async def daemon(fake, tmp_path):
    """A real daemon on the test's loop, its home in tmp_path, Ollama the fake."""
    from tests.tui_support import Daemon, make_home

    running = await Daemon(make_home(tmp_path, fake.url)).start()
    yield running
    await running.stop()


# -- the real CLI, in-process -----------------------------------------------------------------


@pytest.fixture
def home(tmp_path, monkeypatch):
    """NAVI_HOME in tmp_path, for commands run on the profile's file itself (no daemon)."""
    monkeypatch.setenv("NAVI_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    # Text-only search, so "no match" is a meaningful answer; semantic search has its own test.
    monkeypatch.setenv("NAVI_EMBEDDER", "none")
    # These tests cover the commands on the file itself; the daemon path has its own tests.
    monkeypatch.setenv("NAVI_DAEMON", "off")
    return tmp_path


@pytest.fixture
def cli(home, capsys):
    """Run ``navi memory --profile alice ARGS``; returns (exit code, stdout, stderr)."""
    from navi_desktop.cli.main import run

    def call(*args: str, profile: str | None = "alice") -> tuple[int, str, str]:
        capsys.readouterr()
        argv = ["memory"] + (["--profile", profile] if profile else []) + list(args)
        code = run(argv)
        out, err = capsys.readouterr()
        return code, out, err

    return call


@pytest.fixture
def sock_path():
    """A socket path in a fresh folder under /tmp (short: socket paths are limited), removed
    after the test; the ``run`` folder itself is not created."""
    import shutil
    import tempfile
    from pathlib import Path

    root = Path(tempfile.mkdtemp(prefix="navi-sock-", dir="/tmp"))
    try:
        yield root / "run" / "daemon.sock"
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- both storage backends ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_dsn(tmp_path_factory):
    """A real PostgreSQL with pgvector for this test run (see tests/pg_support.py)."""
    from tests.pg_support import start_server

    dsn, server = start_server(str(tmp_path_factory.mktemp("pg")))
    yield dsn
    if server is not None:
        server.cleanup()


@pytest.fixture(params=["sqlite", "postgres"])
async def any_store(request, tmp_path):
    """The same engine API on each backend: the conformance tests run once per backend, with
    the deterministic test embedder, a fresh profile each."""
    from tests.fakes import BagOfWordsEmbedder

    embedder = BagOfWordsEmbedder()
    if request.param == "sqlite":
        opened = await MemoryStore.open(tmp_path / "memory.db", embedder=embedder)
    else:
        from navi_desktop.memory.pg import PgMemoryStore
        from tests.pg_support import profile_name

        dsn = request.getfixturevalue("pg_dsn")
        opened = await PgMemoryStore.open(dsn, profile_name(), embedder=embedder)
    async with opened as s:
        yield s
