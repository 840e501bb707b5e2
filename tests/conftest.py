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
