"""A separate embedding host: ``[ollama] embedding_host`` (or ``NAVI_EMBEDDING_HOST``) sends
every embedding to another Ollama (a desktop's GPU), while chat, extraction and summaries stay
on the chat host. Two fake Ollama servers on loopback, the real daemon on a real socket, the
real ``ollama`` client, the real CLI and the real settings screen."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from navi_desktop.cli.main import run
from navi_desktop.config import load_settings
from navi_desktop.config_save import save_setting
from navi_desktop.config_specs import SPECS
from navi_desktop.daemon.client import RpcCallError
from navi_desktop.daemon.service import Service
from navi_desktop.llm.backend import OllamaBackend
from navi_desktop.llm.errors import OllamaUnreachable
from navi_desktop.ollama_host import resolve_embedding_host
from navi_desktop.paths import Paths
from navi_desktop.tui.status import Status, daemon_fields
from tests.daemon_support import Peer
from tests.fake_ollama import FakeModel, FakeOllama, Reply
from tests.tui_support import DEAD_HOST, SIZE, Daemon, until

EMBED = "nomic-embed-text"
CHAT = FakeModel("llama3.2")
EMBEDDER = FakeModel(EMBED, ("embedding",), "nomic-bert", "137M", "F16", 274_302_450, 8)
DEAD_LINE = (
    f"embedding host {DEAD_HOST} unreachable: connection refused — start Ollama there"
    " (for other machines: `OLLAMA_HOST=0.0.0.0 ollama serve`), or change"
    " ollama.embedding_host in settings / NAVI_EMBEDDING_HOST"
)


@pytest.fixture(autouse=True)
def _no_host_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon reads these at start: only what a test sets counts."""
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.delenv("NAVI_EMBEDDING_HOST", raising=False)


@pytest.fixture
async def chat_host() -> Any:
    """Server A: chat only (it cannot embed: an embedding sent here would fail loudly)."""
    async with FakeOllama([CHAT], default_reply=Reply("Hello from the chat host.")) as fake:
        yield fake


@pytest.fixture
async def embedding_host() -> Any:
    """Server B: embeddings only."""
    async with FakeOllama([EMBEDDER]) as fake:
        yield fake


def write_config(root: Path, ollama: str) -> Paths:
    paths = Paths.from_env({"NAVI_HOME": str(root / "home")})
    paths.config.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text(
        f'[ollama]\n{ollama}chat_model = "llama3.2"\nembedding_model = "{EMBED}"\n'
        '[memory]\nembedder = "ollama"\nprofile = "tester"\n'
    )
    return paths


def hosts(chat: str, embedding: str | None = None) -> str:
    lines = f'host = "{chat}"\n'
    return lines + (f'embedding_host = "{embedding}"\n' if embedding is not None else "")


async def wait_for(condition: Callable[[], Any], timeout: float = 10.0) -> None:
    """Background work (embedding after a write) runs on the daemon's own time."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


def paths_of(fake: FakeOllama) -> list[str]:
    return [r.path for r in fake.requests]


async def embedded_everything(daemon: Daemon) -> None:
    for _ in range(500):
        if (await daemon.call("memory.stats"))["missing_embeddings"] == 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the memories were never embedded")


# -- where each request goes --------------------------------------------------------------------


async def test_embeddings_go_to_the_embedding_host_and_chat_to_the_chat_host(
    tmp_path: Path, chat_host: FakeOllama, embedding_host: FakeOllama
) -> None:
    paths = write_config(tmp_path, hosts(chat_host.url, embedding_host.url))
    daemon = await Daemon(paths).start()
    try:
        settings = await daemon.call("settings.get")
        assert settings["errors"] == []  # a key the daemon knows
        assert settings["settings"]["ollama"]["embedding_host"] == embedding_host.url

        # Indexing a memory (the backfill after a write) embeds on B.
        await daemon.call("memory.add", {"args": ["green tea"], "kwargs": {"key": "tea"}})
        await embedded_everything(daemon)
        documents = [t for b in embedding_host.bodies("/api/embed") for t in b["input"]]
        assert any(t.startswith("search_document: ") and "green tea" in t for t in documents)

        # Search embeds its query on B too.
        hits = await daemon.call("memory.search", {"args": ["green tea"]})
        assert hits and hits[0]["memory"]["value"] == "green tea"
        queries = [t for b in embedding_host.bodies("/api/embed") for t in b["input"]]
        assert "search_query: green tea" in queries

        # Chat: the reply comes from A.
        sent = await daemon.call("chat.send", {"text": "Which tea do I like?"})
        assert sent["reply"] == "Hello from the chat host."
        # Ending the session asks A for the extraction and summary.
        chats_before_end = len(chat_host.bodies("/api/chat"))
        await daemon.call("sessions.end", {"id": sent["session_id"]})
        assert len(chat_host.bodies("/api/chat")) > chats_before_end

        # A pull for the embedding model happens where it will run.
        await daemon.call("ollama.pull", {"model": "mxbai-embed-large", "embedding": True})
        assert "/api/pull" in paths_of(embedding_host)

        # The health command reports both hosts.
        status = await daemon.call("daemon.status")
        assert status["ollama"]["host"] == chat_host.url and status["ollama"]["reachable"]
        assert status["embedding_ollama"] == {
            "host": embedding_host.url,
            "reachable": True,
            "version": "0.12.3",
            "error": None,
        }
    finally:
        await daemon.stop()
    assert "/api/embed" not in paths_of(chat_host)
    assert "/api/chat" not in paths_of(embedding_host)
    assert "/api/pull" not in paths_of(chat_host)


async def test_the_message_backfill_embeds_on_the_embedding_host(
    tmp_path: Path, chat_host: FakeOllama, embedding_host: FakeOllama
) -> None:
    """Messages are embedded later, by the backfill the daemon's maintenance runs."""
    paths = write_config(tmp_path, hosts(chat_host.url, embedding_host.url))
    settings, errors = load_settings(paths.config_file)
    assert errors == []

    async def broadcast(*_: Any) -> None:
        return None

    service = Service(paths, settings, broadcast)
    try:
        await service.chat_send({"text": "I drink green tea every morning"}, Peer())
        before = len(embedding_host.bodies("/api/embed"))
        assert await (await service.store("tester")).backfill_embeddings() > 0
        texts = [t for b in embedding_host.bodies("/api/embed")[before:] for t in b["input"]]
        assert any("I drink green tea every morning" in t for t in texts)
    finally:
        await service.shutdown(budget_s=5)
    assert "/api/embed" not in paths_of(chat_host)


async def test_an_empty_embedding_host_falls_back_to_the_chat_host(
    tmp_path: Path, embedding_host: FakeOllama
) -> None:
    # One server that does both; `embedding_host = ""` means "the chat host", not an error.
    async with FakeOllama([CHAT, EMBEDDER]) as both:
        paths = write_config(tmp_path, hosts(both.url, ""))
        daemon = await Daemon(paths).start()
        try:
            assert (await daemon.call("settings.get"))["errors"] == []
            await daemon.call("memory.add", {"args": ["green tea"], "kwargs": {"key": "tea"}})
            await embedded_everything(daemon)
            status = await daemon.call("daemon.status")
            assert status["ollama"]["host"] == both.url
            assert status["embedding_ollama"] is None  # nothing separate to report
        finally:
            await daemon.stop()
        assert both.bodies("/api/embed")
    assert embedding_host.requests == []


async def test_the_environment_names_the_embedding_host_when_the_file_does_not(
    tmp_path: Path,
    chat_host: FakeOllama,
    embedding_host: FakeOllama,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # NAVI_EMBEDDING_HOST overrides the chat host the file names, as a bare host:port.
    monkeypatch.setenv("NAVI_EMBEDDING_HOST", f"127.0.0.1:{embedding_host.port}")
    paths = write_config(tmp_path, hosts(chat_host.url))
    daemon = await Daemon(paths).start()
    try:
        reply = await daemon.call("settings.get")
        assert reply["settings"]["ollama"]["embedding_host"] is None
        # What the empty field means on this daemon (the settings screen shows it).
        assert reply["unset"]["ollama.embedding_host"] == embedding_host.url
        await daemon.call("memory.add", {"args": ["green tea"], "kwargs": {"key": "tea"}})
        await embedded_everything(daemon)
        status = await daemon.call("daemon.status")
        assert status["embedding_ollama"]["host"] == embedding_host.url
    finally:
        await daemon.stop()
    assert embedding_host.bodies("/api/embed") and "/api/embed" not in paths_of(chat_host)


def test_precedence_is_the_chat_hosts() -> None:
    """The file's own setting first, then the environment, then the chat host (which is the
    file's ``host``, then ``OLLAMA_HOST``): as ``ollama.host`` goes before ``OLLAMA_HOST``."""
    env = {"NAVI_EMBEDDING_HOST": "gpu-box", "OLLAMA_HOST": "10.0.0.2:1234"}
    assert resolve_embedding_host("desk:8080", "lap:1", env) == "http://desk:8080"
    assert resolve_embedding_host(None, "lap:1", env) == "http://gpu-box:11434"
    assert resolve_embedding_host("  ", "lap:1", {"NAVI_EMBEDDING_HOST": " "}) == ("http://lap:1")
    assert resolve_embedding_host(None, None, {"OLLAMA_HOST": "10.0.0.2:1234"}) == (
        "http://10.0.0.2:1234"
    )
    # The chat host's rules apply equally: a listen-all address connects to loopback.
    assert resolve_embedding_host("0.0.0.0:11500", None, {}) == "http://127.0.0.1:11500"
    assert resolve_embedding_host(None, None, {"NAVI_EMBEDDING_HOST": "[::]:1"}) == (
        "http://[::1]:1"
    )


def test_the_setting_is_checked_like_the_chat_host(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[ollama]\nembedding_host = "ftp://desk"\n')
    settings, errors = load_settings(config)
    assert [e.key for e in errors] == ["ollama.embedding_host"]
    assert "must be a URL like http://127.0.0.1:11434 or host:port" in errors[0].reason
    assert settings.ollama.embedding_host is None
    save_setting(config, "ollama.embedding_host", "desk.lan:11434")
    assert load_settings(config)[0].ollama.embedding_host == "desk.lan:11434"
    assert SPECS["ollama.embedding_host"].help.startswith("Ollama server that embeds")


# -- an unreachable embedding host --------------------------------------------------------------


async def test_an_unreachable_embedding_host_is_one_clear_line_and_chat_still_works(
    tmp_path: Path, chat_host: FakeOllama, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = write_config(tmp_path, hosts(chat_host.url, DEAD_HOST))
    daemon = await Daemon(paths).start()
    try:
        sent = await daemon.call("chat.send", {"text": "hello"})
        assert sent["reply"] == "Hello from the chat host."
        await daemon.call("memory.add", {"args": ["green tea"], "kwargs": {"key": "tea"}})
        hits = await daemon.call("memory.search", {"args": ["green tea"]})
        assert [h["memory"]["value"] for h in hits] == ["green tea"]  # words only, meanwhile

        status = await daemon.call("daemon.status")
        assert status["ollama"]["reachable"] is True
        assert status["embedding_ollama"]["reachable"] is False
        assert status["embedding_ollama"]["error"] == DEAD_LINE

        # The embedding model's list (settings screen) names the same host.
        with pytest.raises(RpcCallError) as err:
            await daemon.call("ollama.models", {"embedding": True})
        assert err.value.message == DEAD_LINE

        # `navi daemon status` prints both hosts (the command runs in a thread: the daemon
        # answers on this loop).
        monkeypatch.setenv("NAVI_HOME", str(tmp_path / "home"))
        code, out = await asyncio.to_thread(_cli, "daemon", "status")
        assert code == 0
        lines = out.splitlines()
        assert f"ollama       {chat_host.url} (reachable)" in lines
        assert f"embeddings   {DEAD_HOST} (unreachable: {DEAD_LINE})" in lines

        # The app's banner says it once, with the fix.
        problems = Status(**daemon_fields(status, {})).problems()
        assert [p for p in problems if "embedding host" in p] == [
            f"Embeddings: {DEAD_LINE}. Search uses words only meanwhile."
        ]
    finally:
        await daemon.stop()


def _cli(*argv: str) -> tuple[int, str]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run(list(argv))
    return code, out.getvalue()


async def test_the_backends_errors_name_the_embedding_host() -> None:
    async with OllamaBackend(DEAD_HOST, timeout=2, connect_timeout=1, role="embedding") as gone:
        with pytest.raises(OllamaUnreachable) as err:
            await gone.embed(EMBED, ["hello"])
        assert str(err.value) == DEAD_LINE
        assert (await gone.health()).error == DEAD_LINE
    async with (
        FakeOllama([CHAT]) as lacking,
        OllamaBackend(lacking.url, timeout=2, role="embedding") as there,
    ):
        with pytest.raises(Exception, match=re.escape(f"on the embedding host {lacking.url}")):
            await there.embed(EMBED, ["hello"])
    # The chat host's wording stays as it was.
    async with OllamaBackend(DEAD_HOST, timeout=2, connect_timeout=1) as chat:
        with pytest.raises(
            OllamaUnreachable, match=re.escape(f"cannot reach Ollama at {DEAD_HOST}")
        ):
            await chat.embed(EMBED, ["hello"])


async def test_a_new_embedding_host_applies_at_once(
    tmp_path: Path, chat_host: FakeOllama, embedding_host: FakeOllama
) -> None:
    """An edit of config.toml (any editor) moves the embeddings without a restart."""
    paths = write_config(tmp_path, hosts(chat_host.url, DEAD_HOST))
    daemon = await Daemon(paths).start()
    try:
        assert (await daemon.call("daemon.status"))["embedding_ollama"]["reachable"] is False
        save_setting(paths.config_file, "ollama.embedding_host", embedding_host.url)
        for _ in range(500):
            reply = await daemon.call("settings.get")
            if reply["settings"]["ollama"]["embedding_host"] == embedding_host.url:
                break
            await asyncio.sleep(0.02)
        await daemon.call("memory.add", {"args": ["green tea"], "kwargs": {"key": "tea"}})
        await embedded_everything(daemon)
        status = await daemon.call("daemon.status")
        assert status["embedding_ollama"]["host"] == embedding_host.url
        assert status["embedding_ollama"]["reachable"] is True
    finally:
        await daemon.stop()
    assert embedding_host.bodies("/api/embed")


# -- the settings screen ------------------------------------------------------------------------


async def test_the_settings_screen_edits_the_embedding_host(
    tmp_path: Path, chat_host: FakeOllama, embedding_host: FakeOllama
) -> None:
    from navi_desktop.tui.app import NaviApp
    from navi_desktop.tui.settings.fields import FIELDS
    from navi_desktop.tui.settings.screen import SettingsScreen

    # B lacks the configured embedding model; A has it. The app must look on B.
    embedding_host.models = {m.full_name: m for m in [FakeModel("bge-m3", ("embedding",))]}
    chat_host.models[EMBEDDER.full_name] = EMBEDDER
    paths = write_config(tmp_path, hosts(chat_host.url, embedding_host.url))
    daemon = await Daemon(paths).start()
    try:
        app = NaviApp(paths, autostart=False)
        async with app.run_test(size=SIZE) as pilot:
            # The banner names the embedding model as missing: it is not on the embedding host.
            await until(pilot, lambda: app.status.missing_models == (EMBED,))

            await pilot.press("f4")
            await until(pilot, lambda: isinstance(app.screen, SettingsScreen) and app.screen.loaded)
            screen = app.screen
            assert isinstance(screen, SettingsScreen)
            field = screen.query_one(f"#{FIELDS['ollama.embedding_host'].widget_id}")
            assert field.value == embedding_host.url
            embedding_note = screen.form.note(FIELDS["ollama.embedding_model"])
            chat_note = screen.form.note(FIELDS["ollama.chat_model"])
            await until(pilot, lambda: embedding_note.installed is not None)
            await until(pilot, lambda: chat_note.installed is not None)
            # Each picker lists its own host's models.
            assert [m["name"] for m in embedding_note.installed] == ["bge-m3:latest"]
            assert embedding_note.host == embedding_host.url
            assert "llama3.2:latest" in [m["name"] for m in chat_note.installed]

            # Clear the field and save: the key leaves the file, the chat host embeds again.
            field.focus()
            field.value = ""
            await pilot.press("ctrl+s")
            await until(pilot, lambda: "embedding_host" not in paths.config_file.read_text())

            # Type it back (as host:port) and save: it is written as typed.
            port_form = f"127.0.0.1:{embedding_host.port}"
            field.focus()
            await pilot.press(*port_form)
            await pilot.press("ctrl+s")
            await until(
                pilot,
                lambda: f'embedding_host = "{port_form}"' in paths.config_file.read_text(),
            )
    finally:
        await daemon.stop()
    settings, errors = load_settings(paths.config_file)
    assert errors == [] and settings.ollama.effective_embedding_host({}) == embedding_host.url
