"""Incognito sessions live in the daemon's memory only: each `navi chat --incognito` leaves
one, and before, a script of them grew the daemon without end. Past MAX_INCOGNITO the least
recently used one goes; one still in use stays."""

from __future__ import annotations

from pathlib import Path

import pytest

from navi_desktop.config import load_settings
from navi_desktop.daemon import chat_methods
from navi_desktop.daemon.service import Service
from tests.daemon_support import Peer
from tests.fake_ollama import FakeOllama
from tests.pipeline_helpers import MODELS
from tests.tui_support import make_home


async def nothing(*_: object) -> None:
    return None


async def test_past_the_cap_the_least_recently_used_incognito_session_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chat_methods, "MAX_INCOGNITO", 3)
    async with FakeOllama(MODELS) as fake:
        paths = make_home(tmp_path, fake.url)
        settings, _ = load_settings(paths.config_file)
        service = Service(paths, settings, nothing)
        try:
            ids = []
            for i in range(3):
                sent = await service.chat_send({"text": f"secret {i}", "incognito": True}, Peer())
                ids.append(sent["session_id"])
            # The first is used again: the second is now the least recently used.
            await service.chat_send({"text": "still here", "session_id": ids[0]}, Peer())
            fourth = await service.chat_send({"text": "one more", "incognito": True}, Peer())
            kept = [sid for sid in (*ids, fourth["session_id"]) if service.incognito_session(sid)]
            assert kept == [ids[0], ids[2], fourth["session_id"]]
            assert len(service.incognito_session(ids[0]).history) == 4  # its turns, whole
            assert not (paths.data / "profiles").exists()  # and nothing written
        finally:
            await service.shutdown(budget_s=5)
