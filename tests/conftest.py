"""Fixtures shared by the pipeline tests: the fake Ollama on loopback, the real backend
against it, and a real store file. Modules that need other versions define their own."""

from __future__ import annotations

import pytest

from navi_desktop.memory.store import MemoryStore
from tests.fake_ollama import FakeOllama
from tests.pipeline_helpers import MODELS, make_backend


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
