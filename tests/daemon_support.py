"""The daemon's service in-process for tests: a home in ``tmp_path``, Ollama the fake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from navi_desktop.config import load_settings
from navi_desktop.daemon.service import Broadcast, Service
from navi_desktop.paths import Paths


class Peer:
    """A caller that records the notifications a handler sends it."""

    def __init__(self) -> None:
        self.notes: list[tuple[str, dict[str, Any]]] = []

    async def notify(self, method: str, params: dict[str, Any]) -> bool:
        self.notes.append((method, params))
        return True

    def stop_when_gone(self, task: object) -> None:
        """This caller never goes away."""


def make_service(
    home: Path, ollama_url: str, broadcast: Broadcast, cls: type[Service] = Service
) -> Service:
    """A service for profile "me" without embeddings, its settings read from a config file."""
    paths = Paths.from_env({"NAVI_HOME": str(home)})
    paths.config.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text(
        f'[ollama]\nhost = "{ollama_url}"\n[memory]\nembedder = "none"\nprofile = "me"\n'
    )
    settings, errors = load_settings(paths.config_file)
    assert errors == []
    return cls(paths, settings, broadcast)
