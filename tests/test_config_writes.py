"""Every save of config.toml goes through one locked writer, and the daemon's watch of it
survives what happens to the file and its folder: two saves at once, an editor saving while
the daemon saves, a value too long to read back, an inline table, a symbolic link loop, the
folder removed and made again."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest

from navi_desktop import config_save, file_swap
from navi_desktop.config import MAX_CONFIG_BYTES
from navi_desktop.config_save import save_settings
from navi_desktop.daemon.client import DaemonClient
from navi_desktop.daemon.main import socket_path
from navi_desktop.errors import InvalidInput, NaviError
from navi_desktop.fileio import locked
from tests.tui_support import DEAD_HOST, Daemon, make_home

LOOP = "it is a symbolic link that leads back to itself"


async def settings_call(paths: Any, method: str, params: dict[str, Any] | None = None) -> Any:
    async with await DaemonClient.connect(socket_path(paths)) as client:
        return await client.call(method, params or {}, timeout=30)


def flat(path: Path) -> dict[str, Any]:
    data = tomllib.loads(path.read_text())
    return {
        f"{section}.{key}": value for section, body in data.items() for key, value in body.items()
    }


async def until_settings(paths: Any, check: Any) -> dict[str, Any]:
    """settings.get, asked again until ``check`` holds (generous: the watch is ~25 ms)."""
    for _ in range(400):
        reply = await settings_call(paths, "settings.get")
        if check(reply):
            return reply
        await asyncio.sleep(0.05)
    return reply


async def test_saves_at_once_each_keep_their_change(tmp_path: Path):
    # Before, each save read the file, edited it and replaced it on its own: of six saves at
    # once, each answered success and most changes were gone from the file.
    paths = make_home(tmp_path, DEAD_HOST)
    changes = [
        {"ollama.chat_model": "model-a"},
        {"memory.budget_tokens": 1234},
        {"ollama.embedding_model": "emb-b"},
        {"ui.theme": "nord"},
        {"memory.inactivity_timeout_min": 77},
        {"incognito.read_memory": True},
    ]
    daemon = await Daemon(paths).start()
    try:
        for _ in range(3):
            paths.config_file.write_text("# my comment\n[memory]\nbackups = 5\n")
            await asyncio.gather(
                *(settings_call(paths, "settings.set", {"changes": c}) for c in changes)
            )
            saved = flat(paths.config_file)
            assert all(saved.get(k) == v for c in changes for k, v in c.items()), saved
            assert saved["memory.backups"] == 5
            assert paths.config_file.read_text().startswith("# my comment\n")
    finally:
        await daemon.stop()


@pytest.fixture(params=["swap", "no swap"])
def swap(request, monkeypatch) -> str:
    """Each test twice: with Linux's swap of two names, and as a system without it does."""
    if request.param == "no swap":
        monkeypatch.setattr(file_swap, "_renameat2", lambda: None)
    return request.param


def test_an_editor_save_between_reading_and_writing_is_kept(tmp_path: Path, monkeypatch, swap):
    # An editor saves (a new file renamed over config.toml) just after the writer read the
    # file: the writer reads it again and edits the editor's file, never overwrites it.
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir(mode=0o700)
    config.write_text('# mine\n[ollama]\nchat_model = "before"\n')
    edited = config_save._edited
    saves = []

    def editor_saves_meanwhile(path: Path, old_text: str | None, values: Any) -> str | None:
        new_text = edited(path, old_text, values)
        if not saves:
            swap = config.with_name(".config.toml.swp")
            swap.write_text('# edited in vim\n[ollama]\nchat_model = "from-editor"\n')
            os.replace(swap, config)
            saves.append(1)
        return new_text

    monkeypatch.setattr(config_save, "_edited", editor_saves_meanwhile)
    save_settings(config, {"memory.budget_tokens": 500})
    text = config.read_text()
    assert text.startswith("# edited in vim\n"), text
    assert flat(config) == {"ollama.chat_model": "from-editor", "memory.budget_tokens": 500}
    assert sorted(p.name for p in config.parent.iterdir()) == ["config.toml"]


def test_an_editor_save_just_after_the_writers_last_look_is_kept(tmp_path: Path, monkeypatch):
    """The writer compared the file with what it read, then renamed its own over it: an
    editor's save in between was lost (1 save in 60 under stress). The two names are now
    swapped in one step and the file taken out is the one compared, so an editor's save
    either comes before the swap (taken out, compared, put back, the edit made again on
    it) or after it (over the writer's file, as any later save is)."""
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir(mode=0o700)
    config.write_text('# mine\n[ollama]\nchat_model = "before"\n')
    unchanged = config_save._unchanged
    saves = []

    def editor_saves_after_the_look(held: Path, old_text: str | None) -> None:
        unchanged(held, old_text)
        if not saves:
            swap = config.with_name(".config.toml.swp")
            swap.write_text('# edited in vim\n[ollama]\nchat_model = "from-editor"\n')
            os.replace(swap, config)
            saves.append(1)

    monkeypatch.setattr(config_save, "_unchanged", editor_saves_after_the_look)
    save_settings(config, {"memory.budget_tokens": 500})
    assert config.read_text().startswith("# edited in vim\n")
    assert flat(config)["ollama.chat_model"] == "from-editor"
    assert sorted(p.name for p in config.parent.iterdir()) == ["config.toml"]


def test_an_editor_saving_before_and_during_the_swap_keeps_its_newer_save(
    tmp_path: Path, monkeypatch
):
    """A save before the swap makes the writer put the file it took out back; a second save
    made over the writer's file in that moment is the newer one, and stays (it was taken
    out with the writer's file and deleted)."""
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir(mode=0o700)
    config.write_text('# mine\n[ollama]\nchat_model = "before"\n')
    edited, unchanged = config_save._edited, config_save._unchanged
    saves: list[str] = []

    def editor_saves(text: str) -> None:
        swap = config.with_name(".config.toml.swp")
        swap.write_text(f'# {text}\n[ollama]\nchat_model = "{text}"\n')
        os.replace(swap, config)
        saves.append(text)

    def first_save_before(path: Path, old_text: str | None, values: Any) -> str | None:
        if not saves:
            editor_saves("first")
        return edited(path, old_text, values)

    def second_save_during(held: Path, old_text: str | None) -> None:
        if saves == ["first"]:
            editor_saves("second")
        unchanged(held, old_text)

    monkeypatch.setattr(config_save, "_edited", first_save_before)
    monkeypatch.setattr(config_save, "_unchanged", second_save_during)
    save_settings(config, {"memory.budget_tokens": 500})
    assert flat(config) == {"ollama.chat_model": "second", "memory.budget_tokens": 500}
    assert sorted(p.name for p in config.parent.iterdir()) == ["config.toml"]


def open_paths() -> set[str]:
    """What this process's descriptors lead to."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile (listdir's own)
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
    return found


def test_a_save_waits_for_the_folder_lock_only_so_long(tmp_path: Path, monkeypatch):
    # A save that never ends (another program holding the config folder's lock) makes this
    # one give up with one line, the file unchanged; no descriptor stays open, no lock held.
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir(mode=0o700)
    config.write_text("[memory]\nbudget_tokens = 900\n")
    monkeypatch.setattr(config_save, "LOCK_WAIT_S", 0.2)
    other = os.open(config.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        with pytest.raises(NaviError) as err:
            save_settings(config, {"memory.budget_tokens": 500})
        assert str(err.value) == (
            f"another program holds the lock of {config.parent} (a save that does not end);"
            " the settings were not changed: close it, then save again"
        )
        assert config.read_text() == "[memory]\nbudget_tokens = 900\n"
        fcntl.flock(other, fcntl.LOCK_UN)
        save_settings(config, {"memory.budget_tokens": 500})
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the save let go of it
    finally:
        os.close(other)
    assert flat(config) == {"memory.budget_tokens": 500}
    assert str(config.parent) not in open_paths()


def test_a_lock_another_holds_is_gone_without_or_refused_when_strict(tmp_path: Path):
    other, mine = (os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY) for _ in range(2))
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        with locked(mine, wait_s=0) as held:
            assert held is False  # the work goes on without it
        with pytest.raises(BlockingIOError), locked(mine, wait_s=0, strict=True):
            pytest.fail("done without the lock")
        fcntl.flock(other, fcntl.LOCK_UN)
        with locked(mine, wait_s=0, strict=True) as held:
            assert held is True
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # let go on leaving
    finally:
        os.close(other)
        os.close(mine)


def test_a_value_too_long_to_read_back_is_refused(tmp_path: Path):
    # Before, it was written: a 1.1 MB file no reader takes, and every later save refused.
    config = tmp_path / "config.toml"
    config.write_text("# my comment\n[memory]\nbudget_tokens = 900\n")
    with pytest.raises(InvalidInput) as err:
        save_settings(config, {"ollama.chat_model": "x" * (MAX_CONFIG_BYTES + 1)})
    message = str(err.value)
    assert message.startswith("ollama.chat_model: too long: ") and "give a shorter value" in message
    assert config.read_text() == "# my comment\n[memory]\nbudget_tokens = 900\n"
    save_settings(config, {"memory.budget_tokens": 500})
    assert flat(config) == {"memory.budget_tokens": 500}


@pytest.mark.parametrize(
    "change", [{"ui.keymap.navi.chat.new": "alt+n"}, {"ui.keymap": {"navi.chat.new": "alt+n"}}]
)
def test_a_key_binding_saves_into_an_inline_ui_table(tmp_path: Path, change: dict[str, Any]):
    # Before: "internal error" (tomlkit refuses a [table] inside an inline one).
    config = tmp_path / "config.toml"
    config.write_text('# mine\nui = {theme = "nord"}  # inline\n')
    save_settings(config, change)
    assert tomllib.loads(config.read_text()) == {
        "ui": {"theme": "nord", "keymap": {"navi.chat.new": "alt+n"}}
    }
    assert config.read_text().startswith("# mine\n")


async def test_a_symlink_loop_lets_the_daemon_start_and_a_save_says_why(tmp_path: Path):
    # Before, the daemon could not start (RuntimeError in the watch), and made while it ran,
    # a save answered "internal error".
    paths = make_home(tmp_path, DEAD_HOST)
    paths.config_file.unlink()
    paths.config_file.symlink_to(paths.config_file.name)
    daemon = await Daemon(paths).start()
    try:
        status = await settings_call(paths, "daemon.status")
        assert [LOOP in e and "`rm " in e for e in status["config_errors"]] == [True]
        with pytest.raises(Exception) as err:
            await settings_call(paths, "settings.set", {"changes": {"memory.budget_tokens": 500}})
        assert LOOP in str(err.value) and "internal error" not in str(err.value)
        assert os.readlink(paths.config_file) == paths.config_file.name
    finally:
        await daemon.stop()


async def test_the_watch_survives_its_folder_removed_and_made_again(tmp_path: Path):
    # Before, the watch stayed on the removed folder: no edit applied until a restart.
    paths = make_home(tmp_path, DEAD_HOST, extra="budget_tokens = 901\n")
    daemon = await Daemon(paths).start()
    try:
        shutil.rmtree(paths.config)
        await until_settings(paths, lambda r: r["settings"]["memory"]["budget_tokens"] == 800)
        paths.config.mkdir(mode=0o700)
        for value in (902, 903):  # the folder made again; then an edit of the file in it
            paths.config_file.write_text(f"[memory]\nbudget_tokens = {value}\n")
            reply = await until_settings(
                paths, lambda r, v=value: r["settings"]["memory"]["budget_tokens"] == v
            )
            assert reply["settings"]["memory"]["budget_tokens"] == value
        paths.config_file.write_text('[memory]\nbudget_tokens = "oops"\n')
        reply = await until_settings(paths, lambda r: r["errors"])
        assert reply["errors"][0].startswith("memory.budget_tokens: must be an integer")
    finally:
        await daemon.stop()
