"""Settings: defaults, validation with fallbacks, comment-keeping saves, the live watcher."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import MappingProxyType

import pytest

from navi_desktop.config import (
    DEFAULTS,
    FILE_KEY,
    IncognitoSettings,
    InvalidSetting,
    MemorySettings,
    OllamaSettings,
    SettingError,
    Settings,
    UISettings,
    changed_keys,
    load_settings,
)
from navi_desktop.config_save import save_setting, save_settings
from navi_desktop.config_watch import SettingsWatcher
from navi_desktop.errors import InvalidInput, NaviError
from navi_desktop.paths import Paths
from tests.nobody import needs_root, run_as_nobody


@pytest.fixture
def config(tmp_path):
    return Paths.from_env({"NAVI_HOME": str(tmp_path)}).config / "config.toml"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# ---- loading -------------------------------------------------------------------------------


def test_missing_file_gives_defaults(config):
    settings, errors = load_settings(config)
    assert settings == DEFAULTS == Settings()
    assert errors == []
    assert not config.exists()
    assert settings.memory.budget_tokens == 800
    assert settings.ollama.chat_model == "llama3.2"
    assert settings.ui.keymap == {}


def test_valid_file_is_typed(config):
    write(
        config,
        """
[ollama]
host = "127.0.0.1:9999"
chat_model = "qwen3"
timeout_s = 30          # an int is fine for a float setting
[memory]
profile = "work"
budget_tokens = 1200
inactivity_timeout_min = 5
embedder = "none"
[incognito]
read_memory = true
start_incognito = true
[ui]
theme = "nord"
[ui.keymap]
"navi.quit" = "ctrl+x"
""",
    )
    settings, errors = load_settings(config)
    assert errors == []
    assert settings.ollama.host == "127.0.0.1:9999"
    assert settings.ollama.effective_host({}) == "http://127.0.0.1:9999"
    assert settings.ollama.timeout_s == 30.0 and isinstance(settings.ollama.timeout_s, float)
    assert settings.memory.effective_profile() == "work"
    assert settings.memory.embedder == "none"
    assert settings.incognito.read_memory is True
    assert settings.ui.keymap == {"navi.quit": "ctrl+x"}
    data = settings.to_dict()
    assert data["ui"]["keymap"] == {"navi.quit": "ctrl+x"} and type(data["ui"]["keymap"]) is dict
    assert data["memory"]["budget_tokens"] == 1200
    assert settings.flat()["ollama.chat_model"] == "qwen3"


def test_host_defaults_to_ollama_host_env():
    assert DEFAULTS.ollama.effective_host({}) == "http://127.0.0.1:11434"
    assert DEFAULTS.ollama.effective_host({"OLLAMA_HOST": "10.0.0.2:1234"}) == (
        "http://10.0.0.2:1234"
    )


PREVIOUS = Settings(
    ollama=OllamaSettings("10.0.0.1:11434", "qwen3", "bge-m3", 60.0),
    memory=MemorySettings("p1", 1500, 45, "local"),
    incognito=IncognitoSettings(read_memory=True, start_incognito=True),
    ui=UISettings("nord", MappingProxyType({"navi.quit": "ctrl+x"})),
)

BAD_VALUES = [
    ("ollama", "host", '"ftp://x"', "URL"),
    ("ollama", "host", '"localhost:99999"', "URL"),
    ("ollama", "chat_model", '""', "non-empty string"),
    ("ollama", "embedding_model", "3", "non-empty string"),
    ("ollama", "timeout_s", "0", "greater than 0"),
    ("ollama", "timeout_s", '"fast"', "greater than 0"),
    ("memory", "profile", '"../escape"', "letters, digits"),
    ("memory", "budget_tokens", '"lots"', "between 100 and 8000, got 'lots'"),
    ("memory", "budget_tokens", "99", "between 100 and 8000, got 99"),
    ("memory", "budget_tokens", "true", "between 100 and 8000, got true"),
    ("memory", "budget_tokens", "800.0", "between 100 and 8000"),
    ("memory", "inactivity_timeout_min", "0", "between 1 and 1440"),
    ("memory", "embedder", '"openai"', "one of 'ollama', 'local', 'none'"),
    ("incognito", "read_memory", '"yes"', "true or false, got 'yes'"),
    ("incognito", "start_incognito", "1", "true or false"),
    ("ui", "theme", "[]", "non-empty string, got an array"),
    ("ui", "keymap", '"ctrl+q"', "table"),
]


@pytest.mark.parametrize(("section", "name", "toml", "reason"), BAD_VALUES)
def test_bad_value_reported_and_falls_back(config, section, name, toml, reason):
    key = f"{section}.{name}"
    write(config, f"[{section}]\n{name} = {toml}\n")
    settings, errors = load_settings(config)
    assert [e.key for e in errors] == [key]
    assert reason in errors[0].reason
    assert settings.get(key) == DEFAULTS.get(key)

    good, _ = load_settings(config, previous=PREVIOUS)
    assert good.get(key) == PREVIOUS.get(key) != DEFAULTS.get(key)  # previous good value stays
    for other in PREVIOUS.flat():
        if other != key:  # keys absent from the file take their defaults, not previous values
            assert good.get(other) == DEFAULTS.get(other)


def test_other_keys_survive_a_bad_one_and_unknown_keys_are_reported(config):
    write(
        config,
        """
mystery = 1
[memory]
budget_tokens = "lots"
inactivity_timeout_min = 10
budget_token = 900
[ui.keymap]
"navi.quit" = "ctrl+q"
"navi.help" = 5
[plugins]
x = 1
""",
    )
    settings, errors = load_settings(config)
    by_key = {e.key: e.reason for e in errors}
    assert set(by_key) == {
        "mystery",
        "plugins",
        "memory.budget_tokens",
        "memory.budget_token",
        "ui.keymap.navi.help",
    }
    assert by_key["memory.budget_token"].startswith("unknown setting")
    assert "did you mean 'memory.budget_tokens'" in by_key["memory.budget_token"]
    assert settings.memory.inactivity_timeout_min == 10
    assert settings.memory.budget_tokens == 800
    assert settings.ui.keymap == {"navi.quit": "ctrl+q"}
    assert str(errors[0]).startswith(errors[0].key + ": ")


def test_section_that_is_not_a_table(config):
    write(config, "memory = 5\n")
    previous = Settings(memory=MemorySettings(budget_tokens=999))
    settings, errors = load_settings(config, previous=previous)
    assert [e.key for e in errors] == ["memory"]
    assert settings.memory.budget_tokens == 999


def test_invalid_toml_reports_line_and_column_and_leaves_file(config):
    text = "# mine\n[ollama]\nchat_model = qwen\n"
    write(config, text)
    before = config.stat().st_mtime_ns
    settings, errors = load_settings(config)
    assert settings == DEFAULTS
    [error] = errors
    assert error.key == FILE_KEY
    assert (error.line, error.column) == (3, 14)
    assert str(config) in error.reason and "line 3, column 14" in error.reason
    assert "not changed" in error.reason
    previous = Settings(memory=MemorySettings(budget_tokens=999))
    kept, errors = load_settings(config, previous=previous)
    assert kept == previous and "previous settings" in errors[0].reason
    assert config.read_text() == text and config.stat().st_mtime_ns == before
    with pytest.raises(InvalidInput, match="line 3, column 14"):
        save_setting(config, "ui.theme", "nord")
    assert config.read_text() == text


def test_unreadable_file(config):
    write(config, "x")
    config.write_bytes(b"\xff\xfe[ui]\n")
    settings, errors = load_settings(config)
    assert settings == DEFAULTS and errors[0].key == FILE_KEY and "UTF-8" in errors[0].reason


PLANTED_CHECK = """
import sys
from pathlib import Path
from navi_desktop.config import DEFAULTS, load_settings
from navi_desktop.config_save import save_setting
from navi_desktop.errors import InvalidInput
path = Path(sys.argv[1])
settings, errors = load_settings(path)
assert settings == DEFAULTS, settings
print(errors[0].reason)
try:
    save_setting(path, "ui.theme", "nord")
except InvalidInput as err:
    print(err)
"""


@pytest.mark.parametrize(
    ("plant", "reason"),
    [
        (lambda p: os.mkfifo(p), "it is not a regular file; move it away"),
        (lambda p: p.symlink_to("/dev/zero"), "it is not a regular file; move it away"),
        (lambda p: p.mkdir(), "it is a folder; move it away"),
        (
            lambda p: p.write_bytes(b"#" * (2 << 20)),
            "it is larger than 1,048,576 bytes; a settings file is a few lines: shorten it in"
            " an editor",
        ),
    ],
    ids=["named pipe", "link to /dev/zero", "folder", "2 MiB"],
)
def test_a_planted_settings_file_is_one_line_not_a_hang(config, plant, reason):
    # A named pipe would hold every command that reads the settings (the CLI, the daemon's
    # start) forever, and /dev/zero would fill its memory: a process of its own, with a limit.
    config.parent.mkdir(parents=True)
    plant(config)
    done = subprocess.run(
        [sys.executable, "-c", PLANTED_CHECK, str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    loaded, saved = done.stdout.splitlines()
    assert loaded == f"cannot read {config}: {reason}; the defaults are in force"
    assert saved == f"cannot read {config}: {reason}; the file was not changed"


def test_a_file_where_the_settings_folder_goes_is_worded_as_when_saving(tmp_path):
    # Before, reading said "Not a directory; check the file and its disk" where saving named
    # the file in the folder's place.
    (tmp_path / "navi").write_text("not a folder")
    config = tmp_path / "navi" / "config.toml"
    _, errors = load_settings(config)
    assert [e.reason for e in errors] == [
        f"cannot use {config}: {tmp_path / 'navi'} is not a folder; the defaults are in force:"
        " move that away, then try again"
    ]
    with pytest.raises(NaviError) as err:
        save_setting(config, "ui.theme", "nord")
    assert f"{tmp_path / 'navi'} is not a folder; the settings were not changed" in str(err.value)


@needs_root
def test_a_settings_file_its_user_cannot_read_names_the_chmod():
    root = Path(tempfile.mkdtemp(prefix="navi-unreadable-"))  # nobody must reach the folder
    try:
        root.chmod(0o755)
        config = root / "config.toml"
        config.write_text('[ui]\ntheme = "nord"\n')
        config.chmod(0o600)
        reasons = run_as_nobody(lambda: [e.reason for e in load_settings(config)[1]])
    finally:
        shutil.rmtree(root)
    assert reasons == [
        f"cannot use {config}: permission denied on {config}; the defaults are in force: give"
        f" your user read and write access to it and its folder (e.g. `chmod u+rw {config}` and"
        f" `chmod u+rwx {root}`)"
    ]


# ---- saving --------------------------------------------------------------------------------

USER_FILE = """\
# My Navi settings -- do not lose this comment

[ollama]
# which model answers
chat_model = "llama3.2"   # fast enough
timeout_s = 120

[memory]
budget_tokens = 800 # tokens per turn
future_option = "kept"

[plugins]   # not Navi's (yet)
enabled = ["a", "b"]
"""


def test_save_keeps_comments_and_unknown_keys(config):
    write(config, USER_FILE)
    config.chmod(0o644)
    save_settings(
        config,
        {"ollama.chat_model": "qwen3", "memory.budget_tokens": 1500, "ui.theme": "nord"},
    )
    text = config.read_text()
    expected = (
        USER_FILE.replace('"llama3.2"   # fast', '"qwen3"   # fast')
        .replace("800 # tokens", "1500 # tokens")
        .rstrip("\n")
    )
    assert text.startswith(expected)  # every untouched byte is where it was
    assert text[len(expected) :].strip() == '[ui]\ntheme = "nord"'
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    assert os.listdir(config.parent) == ["config.toml"]  # no temp file left behind

    settings, errors = load_settings(config)
    assert settings.ollama.chat_model == "qwen3"
    assert settings.memory.budget_tokens == 1500
    assert settings.ui.theme == "nord"
    assert [e.key for e in errors] == ["memory.future_option", "plugins"]  # reported, kept


def test_unchanged_value_keeps_formatting_and_none_unsets(config):
    write(config, USER_FILE)
    save_setting(config, "ollama.timeout_s", 120.0)  # same value as the int in the file
    assert config.read_text() == USER_FILE
    save_setting(config, "memory.budget_tokens", None)  # back to the default
    assert "budget_tokens" not in config.read_text()
    assert "future_option" in config.read_text()


def test_invalid_save_raises_and_leaves_file(config):
    write(config, USER_FILE)
    before = config.stat().st_mtime_ns
    with pytest.raises(InvalidInput, match=r"memory\.budget_tokens: must be an integer") as info:
        save_settings(config, {"ollama.chat_model": "qwen3", "memory.budget_tokens": "lots"})
    assert isinstance(info.value, InvalidSetting)
    assert info.value.errors == [
        SettingError("memory.budget_tokens", "must be an integer between 100 and 8000, got 'lots'")
    ]
    with pytest.raises(InvalidInput, match="unknown setting"):
        save_setting(config, "memory.budget", 900)
    with pytest.raises(InvalidInput, match=r"ui\.keymap\.navi\.quit"):
        save_setting(config, "ui.keymap.navi.quit", "ctrl q")
    assert config.read_text() == USER_FILE and config.stat().st_mtime_ns == before


def test_new_file_has_header_and_round_trips(config):
    changes = {
        "ollama.host": "https://ollama.example.com",
        "ollama.timeout_s": 45.5,
        "memory.profile": "work",
        "memory.embedder": "local",
        "incognito.read_memory": True,
        "ui.keymap": {"navi.quit": "ctrl+q", "navi.prompt.send": "ctrl+enter"},
    }
    save_settings(config, changes)
    text = config.read_text()
    assert text.startswith("# Navi Desktop settings")
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    settings, errors = load_settings(config)
    assert errors == []
    assert {key: settings.flat()[key] for key in changes} == changes

    save_setting(config, "ui.keymap.navi.help", "f1")
    save_setting(config, "ui.keymap.navi.prompt.send", None)
    settings, _ = load_settings(config)
    assert settings.ui.keymap == {"navi.quit": "ctrl+q", "navi.help": "f1"}
    assert changed_keys(DEFAULTS, settings) == {
        "ollama.host",
        "ollama.timeout_s",
        "memory.profile",
        "memory.embedder",
        "incognito.read_memory",
        "ui.keymap",
    }


def test_save_through_symlink_keeps_link(config, tmp_path):
    real = tmp_path / "dotfiles" / "navi.toml"
    write(real, "# linked\n")
    config.parent.mkdir(parents=True, exist_ok=True)
    config.symlink_to(real)
    save_setting(config, "ui.theme", "nord")
    assert config.is_symlink()
    assert real.read_text() == '# linked\n\n[ui]\ntheme = "nord"\n'


def test_config_does_not_import_ui_or_ollama():
    code = (
        "import sys, navi_desktop.config, navi_desktop.config_watch;"
        "print(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert not {"textual", "ollama", "httpx", "tomlkit", "watchfiles"} & set(out)


# ---- the live watcher ----------------------------------------------------------------------


class Recorder:
    def __init__(self):
        self.calls: list[tuple[Settings, list[SettingError], set[str]]] = []
        self.event = asyncio.Event()

    async def __call__(self, settings, errors, changed):
        self.calls.append((settings, errors, changed))
        self.event.set()

    async def next(self, timeout=2.0):
        await asyncio.wait_for(self.event.wait(), timeout)
        self.event.clear()
        return self.calls[-1]


@pytest.fixture
async def watched(config):
    write(config, "# mine\n[memory]\nbudget_tokens = 900\n")
    recorder = Recorder()
    watcher = SettingsWatcher(config, recorder)
    await watcher.start()
    yield watcher, recorder
    await watcher.stop()


async def test_watcher_sees_in_place_write(watched, config):
    watcher, recorder = watched
    assert watcher.settings.memory.budget_tokens == 900
    started = time.monotonic()
    with open(config, "a", encoding="utf-8") as handle:  # in place, same inode
        handle.write("inactivity_timeout_min = 7\n")
    settings, errors, changed = await recorder.next()
    assert time.monotonic() - started < 2
    assert settings.memory.inactivity_timeout_min == 7 and errors == []
    assert changed == {"memory.inactivity_timeout_min"}
    assert watcher.settings == settings


async def test_watcher_sees_editor_style_save(watched, config):
    _, recorder = watched
    temp = config.with_name(".config.toml.swp")
    temp.write_text("# mine\n[memory]\nbudget_tokens = 950\n[ui]\ntheme = 'nord'\n")
    os.replace(temp, config)
    settings, errors, changed = await recorder.next()
    assert changed == {"memory.budget_tokens", "ui.theme"} and errors == []
    # a second rename-over is seen too (a file watch would have lost the inode)
    temp.write_text("[memory]\nbudget_tokens = 960\n")
    os.replace(temp, config)
    settings, _, changed = await recorder.next()
    assert settings.memory.budget_tokens == 960
    assert changed == {"memory.budget_tokens", "ui.theme"}  # theme back to its default


async def test_watcher_reports_invalid_edit_and_keeps_good_value(watched, config):
    watcher, recorder = watched
    config.write_text("[memory]\nbudget_tokens = 'lots'\ninactivity_timeout_min = 3\n")
    settings, errors, changed = await recorder.next()
    assert [e.key for e in errors] == ["memory.budget_tokens"]
    assert settings.memory.budget_tokens == 900  # the previous good value stays
    assert changed == {"memory.inactivity_timeout_min"}
    config.write_text("[memory\n")  # broken TOML: everything stays, one file error
    settings, errors, changed = await recorder.next()
    assert errors[0].key == FILE_KEY and changed == set()
    assert settings.memory.inactivity_timeout_min == 3
    config.write_text("[memory]\nbudget_tokens = 1000\n")  # fixed: errors cleared
    settings, errors, _ = await recorder.next()
    assert errors == [] and settings.memory.budget_tokens == 1000
    assert watcher.errors == []


async def test_watcher_ignores_other_files_and_identical_saves(watched, config):
    _, recorder = watched
    (config.parent / "other.toml").write_text("x = 1\n")
    save_setting(config, "memory.budget_tokens", 900)  # same value: no write
    config.write_text(config.read_text())  # rewritten, nothing changed
    with pytest.raises(TimeoutError):
        await recorder.next(timeout=0.4)
    assert recorder.calls == []


async def test_watcher_stop_is_prompt_and_leaves_no_task(config):
    recorder = Recorder()
    watcher = SettingsWatcher(config, recorder)
    await watcher.start()  # creates the folder; no file yet: defaults
    assert watcher.running and watcher.settings == DEFAULTS
    started = time.monotonic()
    await watcher.stop()
    assert time.monotonic() - started < 0.5
    assert not watcher.running
    current = asyncio.current_task()
    assert [t for t in asyncio.all_tasks() if t is not current] == []
    await watcher.stop()  # idempotent


async def test_watcher_survives_a_failing_callback(config):
    calls = []

    def broken(settings, errors, changed):
        calls.append(changed)
        raise RuntimeError("boom")

    watcher = SettingsWatcher(config, broken)
    await watcher.start()
    try:
        save_setting(config, "ui.theme", "nord")
        for _ in range(200):
            if calls:
                break
            await asyncio.sleep(0.01)
        save_setting(config, "ui.theme", "dracula")
        for _ in range(200):
            if len(calls) == 2:
                break
            await asyncio.sleep(0.01)
        assert calls == [{"ui.theme"}, {"ui.theme"}]
        assert watcher.settings.ui.theme == "dracula"
    finally:
        await watcher.stop()
