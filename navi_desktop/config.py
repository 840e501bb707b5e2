"""Settings: one typed, frozen model read from ``config.toml``.

- :func:`load_settings` reads and validates the file. Every bad value is reported as a
  :class:`SettingError` (dotted key and reason) and that key keeps its fallback: the default,
  or on a reload the previous good value. Unknown keys are reported, never deleted.
- :mod:`navi_desktop.config_specs` holds each key's check; :mod:`navi_desktop.config_save`
  writes changes back keeping the file's comments.
- :class:`navi_desktop.config_watch.SettingsWatcher` applies edits made in any editor live.

Stdlib only, so every layer can use it.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from navi_desktop.config_specs import (
    KEYMAP_KEY,
    SPECS,
    BadValue,
    binding_id,
    key_string,
    show_value,
)
from navi_desktop.errors import InvalidInput
from navi_desktop.fileio import NotRegularFile, read_regular
from navi_desktop.ollama_host import resolve_embedding_host
from navi_desktop.os_errors import os_refusal
from navi_desktop.paths import default_profile

DSN_ENV = "NAVI_PG_DSN"
FILE_KEY = ""  # SettingError.key of an error about the whole file (unreadable, invalid TOML)
MAX_CONFIG_BYTES = 1 << 20  # a settings file is a few hundred bytes


# ---- the model -----------------------------------------------------------------------------


@dataclass(frozen=True)
class OllamaSettings:
    host: str | None = None  # None: OLLAMA_HOST, else http://127.0.0.1:11434
    chat_model: str = "llama3.2"
    embedding_model: str = "nomic-embed-text"
    timeout_s: float = 120.0
    background_timeout_s: float = 900.0  # one extraction/summary request; nobody waits on it
    reply_max_tokens: int = 4096  # a chat reply is cut here (and says so)
    embedding_host: str | None = None  # None: NAVI_EMBEDDING_HOST, else the chat host

    def effective_host(self, environ: Mapping[str, str] | None = None) -> str:
        """The base URL to connect to (``host``, else ``OLLAMA_HOST``, else the local default)."""
        from navi_desktop.llm.types import resolve_host  # not at import: the app starts faster

        return resolve_host(self.host, environ)

    def effective_embedding_host(self, environ: Mapping[str, str] | None = None) -> str:
        return resolve_embedding_host(self.embedding_host, self.host, environ)


@dataclass(frozen=True)
class MemorySettings:
    profile: str | None = None  # None: the OS user name
    budget_tokens: int = 800
    inactivity_timeout_min: int = 30
    embedder: str = "ollama"
    backups: int = 3  # daily backups kept of each profile; 0: none
    backend: str = "sqlite"  # or "postgres": the profile lives on a memory server
    dsn: str | None = None  # None: NAVI_PG_DSN

    def effective_profile(self) -> str:
        return self.profile or default_profile()

    def effective_dsn(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The memory server: ``dsn``, else ``NAVI_PG_DSN`` (the file first, as for hosts)."""
        env = os.environ if environ is None else environ
        return self.dsn or env.get(DSN_ENV, "").strip() or None


@dataclass(frozen=True)
class IncognitoSettings:
    read_memory: bool = False
    start_incognito: bool = False


def _empty_keymap() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class UISettings:
    theme: str = "textual-dark"
    keymap: Mapping[str, str] = field(default_factory=_empty_keymap)  # binding id -> key(s)


@dataclass(frozen=True)
class Settings:
    ollama: OllamaSettings = field(default_factory=OllamaSettings)
    memory: MemorySettings = field(default_factory=MemorySettings)
    incognito: IncognitoSettings = field(default_factory=IncognitoSettings)
    ui: UISettings = field(default_factory=UISettings)

    def get(self, key: str) -> Any:
        """The value of a dotted key (``"memory.budget_tokens"``); ``KeyError`` if unknown."""
        if key not in SPECS:
            raise KeyError(key)
        section, name = key.split(".", 1)
        return getattr(getattr(self, section), name)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Plain JSON-ready nested dicts, ``{"ollama": {"host": None, ...}, ...}``."""
        out: dict[str, dict[str, Any]] = {}
        for section in _SECTIONS:
            part = getattr(self, section)
            out[section] = {f.name: _plain(getattr(part, f.name)) for f in dataclasses.fields(part)}
        return out

    def flat(self) -> dict[str, Any]:
        """``{"memory.budget_tokens": 800, ...}`` for every known key."""
        return {key: _plain(self.get(key)) for key in SPECS}


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


DEFAULTS = Settings()
_SECTIONS = ("ollama", "memory", "incognito", "ui")


@dataclass(frozen=True)
class SettingError:
    """One problem: ``key`` is dotted (``"memory.budget_tokens"``), or ``""`` for the file."""

    key: str
    reason: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        return f"{self.key}: {self.reason}" if self.key else self.reason

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class InvalidSetting(InvalidInput):
    """A save refused: ``errors`` lists each bad key with its reason; the file is unchanged."""

    def __init__(self, errors: list[SettingError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors))


SHOWN_ERRORS = 3
CHECK_COMMAND = "navi config check"


def capped(errors: list[str], shown: int = SHOWN_ERRORS) -> list[str]:
    """The first few problems, then one line for the rest: forty (an old version's file)
    filled a whole screen and hid every field of the settings screen."""
    if len(errors) <= shown + 1:
        return list(errors)
    return [*errors[:shown], f"and {len(errors) - shown} more: `{CHECK_COMMAND}` lists them all"]


def changed_keys(old: Settings, new: Settings) -> set[str]:
    """Dotted keys whose value differs (``ui.keymap`` counts as one key)."""
    return {key for key in SPECS if old.get(key) != new.get(key)}


def unknown(key: str, known: Iterable[str]) -> SettingError:
    # 0.75: "memory.old_setting_1" is not a typo of "memory.dsn" (the shared section is half)
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return SettingError(
        key, f"unknown setting{hint}; it is ignored: correct its name, or remove it from the file"
    )


def parse_settings(
    data: Mapping[str, Any], previous: Settings | None = None
) -> tuple[Settings, list[SettingError]]:
    """Validate a parsed document. A missing key takes its default; a bad one its fallback
    (``previous``'s value, else the default) and is reported."""
    fallback = previous or DEFAULTS
    errors: list[SettingError] = []
    values: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
    which = "the last good value" if previous else "the default"

    def kept(key: str) -> str:
        """What is in force instead of the bad value: every client shows it with the error."""
        value = _plain(fallback.get(key))
        named = "the default" if value == _plain(DEFAULTS.get(key)) else which
        return f"{named} ({'unset' if value is None else show_value(value)}) stays in force"

    for section, body in data.items():
        if section not in _SECTIONS:
            errors.append(unknown(section, [*_SECTIONS, *SPECS]))
            continue
        if not isinstance(body, Mapping):
            errors.append(
                SettingError(
                    section,
                    f"must be a table ([{section}]), got {show_value(body)}; the section's"
                    f" {which.removeprefix('the ')}s stay in force",
                )
            )
            for key in SPECS:
                if key.startswith(section + "."):
                    values[section][key.split(".", 1)[1]] = fallback.get(key)
            continue
        for name, raw in body.items():
            key = f"{section}.{name}"
            spec = SPECS.get(key)
            if spec is None:
                errors.append(unknown(key, SPECS))
            elif key == KEYMAP_KEY:
                values[section][name] = _parse_keymap(raw, fallback.ui.keymap, errors)
            else:
                try:
                    values[section][name] = spec.check(raw)
                except BadValue as err:
                    errors.append(SettingError(key, f"{err}; {kept(key)}"))
                    values[section][name] = fallback.get(key)
    if "keymap" in values["ui"]:
        values["ui"]["keymap"] = MappingProxyType(dict(values["ui"]["keymap"]))
    settings = Settings(
        ollama=OllamaSettings(**values["ollama"]),
        memory=MemorySettings(**values["memory"]),
        incognito=IncognitoSettings(**values["incognito"]),
        ui=UISettings(**values["ui"]),
    )
    return settings, errors


def _parse_keymap(
    raw: Any, fallback: Mapping[str, str], errors: list[SettingError]
) -> Mapping[str, str]:
    if not isinstance(raw, Mapping):
        errors.append(
            SettingError(
                KEYMAP_KEY, f'must be a table of binding id = "key", got {show_value(raw)}'
            )
        )
        return fallback
    out: dict[str, str] = {}
    for binding, key in raw.items():
        where = f"{KEYMAP_KEY}.{binding}"
        try:
            binding_id(binding)
        except BadValue as err:
            errors.append(SettingError(where, f"{err}; its key {show_value(key)} is ignored"))
            continue
        try:
            out[binding] = key_string(key)
        except BadValue as err:
            last = fallback.get(binding)
            kept = f"the last good key {last!r}" if last else "its default key"
            errors.append(SettingError(where, f"{err}; {kept} stays in force"))
            if last:
                out[binding] = last
    return out


# ---- reading -------------------------------------------------------------------------------

_POSITION_RE = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


def load_settings(
    path: Path, previous: Settings | None = None
) -> tuple[Settings, list[SettingError]]:
    """Read and validate ``path``. A missing file gives the defaults and no errors; a file that
    cannot be read or parsed gives ``previous`` (else the defaults) and one error naming the
    file, line and column. Never raises for the file's content and never writes."""
    fallback = previous or DEFAULTS
    kept = "the previous settings stay in force" if previous else "the defaults are in force"
    try:
        raw = read_regular(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        return DEFAULTS, []
    except OSError as err:
        return fallback, [SettingError(FILE_KEY, cannot_read(path, err, kept))]
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        reason = f"{path} is not UTF-8 text (byte {err.start}); the file was not changed and {kept}"
        return fallback, [SettingError(FILE_KEY, reason)]
    except tomllib.TOMLDecodeError as err:
        outcome = f"fix it in an editor; the file was not changed and {kept}"
        return fallback, [toml_error(path, err, outcome)]
    except (ValueError, RecursionError) as err:  # past the parser's own limits
        reason = f"{path} cannot be read as settings: {too_deep(err)}: fix it in an editor"
        return fallback, [SettingError(FILE_KEY, f"{reason}; the file was not changed and {kept}")]
    return parse_settings(data, previous)


def cannot_read(path: Path, err: OSError, kept: str) -> str:
    """Why the settings file cannot be read, what stayed as it was (``kept``) and what to do
    about it; a permission, or a file where a folder goes, in the words of every other file."""
    if err.errno in (errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR):
        return str(os_refusal(err, path, kept))
    if err.errno == errno.ELOOP:
        why = "it is a symbolic link that leads back to itself"
        fix = f"remove it (`rm {path}`) or point it at a file"
    elif err.errno == errno.EFBIG:
        why, fix = str(err.strerror), "a settings file is a few lines: shorten it in an editor"
    elif isinstance(err, NotRegularFile):
        why, fix = f"{err.strerror or 'it is not a file'}", "move it away"
    else:
        why, fix = str(err.strerror or err), "check the file and its disk"
    return f"cannot read {path}: {why}; {fix}; {kept}"


def too_deep(err: ValueError | RecursionError) -> str:
    """What Python's TOML parser met that is no syntax error: a number too long to convert,
    or tables and arrays nested past Python's depth."""
    if isinstance(err, RecursionError):
        return "its tables or arrays are nested too deep"
    return "it holds a number too long to read (over 4,300 digits)"


def toml_error(path: Path, err: tomllib.TOMLDecodeError, outcome: str) -> SettingError:
    message, line, column, where = str(err), None, None, ""
    match = _POSITION_RE.search(message)
    if match:
        line, column = int(match[1]), int(match[2])
        message = message[: match.start()]
        where = f" at line {line}, column {column}"
    return SettingError(
        FILE_KEY, f"{path} is not valid TOML{where}: {message}; {outcome}", line, column
    )
