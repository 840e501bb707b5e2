"""Settings: one typed, frozen model read from ``config.toml`` and written back keeping comments.

- :func:`load_settings` reads and validates the file. Every bad value is reported as a
  :class:`SettingError` (dotted key and reason) and that key keeps its fallback: the default,
  or on a reload the previous good value. Unknown keys are reported, never deleted.
- :func:`save_settings` / :func:`save_setting` validate first, then edit the document with
  ``tomlkit`` (comments, blank lines and unknown keys survive) and replace the file atomically,
  mode 0600 in a 0700 folder.
- :class:`navi_desktop.config_watch.SettingsWatcher` applies edits made in any editor live.

Stdlib only at import time (``tomlkit`` is imported when saving), so every layer can use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from navi_desktop.errors import InvalidInput
from navi_desktop.fileio import read_regular, write_private_atomic
from navi_desktop.ollama_host import resolve_embedding_host, valid_host
from navi_desktop.paths import check_profile_name, default_profile, ensure_private_dir

EMBEDDERS = ("ollama", "local", "none")
BACKENDS = ("sqlite", "postgres")
DSN_ENV = "NAVI_PG_DSN"
FILE_KEY = ""  # SettingError.key of an error about the whole file (unreadable, invalid TOML)
MAX_CONFIG_BYTES = 1 << 20  # a settings file is a few hundred bytes
KEYMAP_KEY = "ui.keymap"

_HEADER = (
    "# Navi Desktop settings. Edit here or in the settings screen; changes apply live.\n"
    "# Every setting is optional: a missing one takes its default.\n"
)


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


def changed_keys(old: Settings, new: Settings) -> set[str]:
    """Dotted keys whose value differs (``ui.keymap`` counts as one key)."""
    return {key for key in SPECS if old.get(key) != new.get(key)}


# ---- validation ----------------------------------------------------------------------------


class _Bad(ValueError):
    """A value rejected; the message is the reason."""


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "an array"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Bad(f"must be a non-empty string, got {_show(value)}")
    return value.strip()


def _int_range(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _Bad(f"must be an integer between {low} and {high}, got {_show(value)}")
        return value

    return check


def _positive_number(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise _Bad(f"must be a number of seconds greater than 0, got {_show(value)}")
    return float(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"must be true or false, got {_show(value)}")
    return value


def _choice(*options: str) -> Callable[[Any], str]:
    listed = ", ".join(repr(o) for o in options)

    def check(value: Any) -> str:
        if value not in options or not isinstance(value, str):
            raise _Bad(f"must be one of {listed}, got {_show(value)}")
        return value

    return check


def _host(value: Any) -> str:
    if (host := valid_host(value)) is None:
        raise _Bad(f"must be a URL like http://127.0.0.1:11434 or host:port, got {_show(value)}")
    return host


def _optional_host(value: Any) -> str | None:
    """A host, or None (the fallback) for an empty string: ``embedding_host = ""``."""
    return None if isinstance(value, str) and not value.strip() else _host(value)


def _dsn(value: Any) -> str | None:
    """A PostgreSQL URL, or None (NAVI_PG_DSN) for an empty string."""
    if isinstance(value, str) and not value.strip():
        return None
    if not isinstance(value, str) or not value.strip().startswith(("postgresql://", "postgres://")):
        raise _Bad(f"must be a URL like postgresql://user@host/navi, got {_show_dsn(value)}")
    return value.strip()


def _show_dsn(value: Any) -> str:
    """A rejected DSN as shown back: never with its password."""
    if isinstance(value, str) and "@" in value:
        return repr(re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", value))
    return _show(value)


def _profile(value: Any) -> str:
    with contextlib.suppress(InvalidInput):
        if isinstance(value, str):
            return check_profile_name(value)
    raise _Bad(
        "must be 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit,"
        f" got {_show(value)}"
    )


def _key_string(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value.strip()):
        raise _Bad(f'must be a key such as "ctrl+q" (no spaces), got {_show(value)}')
    return value.strip()


def _keymap_table(value: Any) -> dict[str, str]:
    """Whole-table check, used when saving ``ui.keymap``."""
    if not isinstance(value, Mapping):
        raise _Bad(f'must be a table of binding id = "key", got {_show(value)}')
    out: dict[str, str] = {}
    for binding, key in value.items():
        if not isinstance(binding, str) or not binding:
            raise _Bad(f"binding ids must be non-empty strings, got {_show(binding)}")
        try:
            out[binding] = _key_string(key)
        except _Bad as err:
            raise _Bad(f"{binding!r} {err}") from None
    return out


@dataclass(frozen=True)
class SettingSpec:
    key: str
    check: Callable[[Any], Any]
    help: str


SPECS: dict[str, SettingSpec] = {
    spec.key: spec
    for spec in (
        SettingSpec(
            "ollama.host",
            _host,
            "Ollama server URL or host:port; unset: OLLAMA_HOST, else http://127.0.0.1:11434",
        ),
        SettingSpec(
            "ollama.embedding_host",
            _optional_host,
            "Ollama server that embeds; unset: NAVI_EMBEDDING_HOST, else the chat host",
        ),
        SettingSpec("ollama.chat_model", _text, "Model that writes the replies"),
        SettingSpec("ollama.embedding_model", _text, "Model that embeds memories for search"),
        SettingSpec("ollama.timeout_s", _positive_number, "Seconds to wait for Ollama"),
        SettingSpec(
            "ollama.background_timeout_s",
            _positive_number,
            "Seconds one background request (learning from a session) may take",
        ),
        SettingSpec(
            "ollama.reply_max_tokens",
            _int_range(64, 131072),
            "Longest chat reply in tokens; a longer one is cut and marked as cut",
        ),
        SettingSpec("memory.profile", _profile, "Memory profile; unset: the OS user name"),
        SettingSpec(
            "memory.budget_tokens", _int_range(100, 8000), "Tokens of memory put into each turn"
        ),
        SettingSpec(
            "memory.inactivity_timeout_min",
            _int_range(1, 1440),
            "Minutes of silence after which a session ends and is learned from",
        ),
        SettingSpec(
            "memory.embedder", _choice(*EMBEDDERS), "Embeddings: 'ollama', 'local' or 'none'"
        ),
        SettingSpec(
            "memory.backups",
            _int_range(0, 100),
            "Daily backups kept of each profile, made after the first write of a day; 0: none",
        ),
        SettingSpec(
            "memory.backend",
            _choice(*BACKENDS),
            "Where memory lives: 'sqlite' (a file per profile) or 'postgres' (a memory server)",
        ),
        SettingSpec(
            "memory.dsn",
            _dsn,
            "The memory server for backend 'postgres'; unset: NAVI_PG_DSN",
        ),
        SettingSpec(
            "incognito.read_memory", _boolean, "Incognito sessions may read (never write) memory"
        ),
        SettingSpec("incognito.start_incognito", _boolean, "Start new chats in incognito"),
        SettingSpec("ui.theme", _text, "Textual theme name"),
        SettingSpec(KEYMAP_KEY, _keymap_table, "Key bindings: binding id = key(s)"),
    )
}


def _unknown(key: str, known: Iterable[str]) -> SettingError:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return SettingError(key, f"unknown setting{hint}; it is kept in the file but ignored")


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
        return f"{named} ({'unset' if value is None else _show(value)}) stays in force"

    for section, body in data.items():
        if section not in _SECTIONS:
            errors.append(_unknown(section, [*_SECTIONS, *SPECS]))
            continue
        if not isinstance(body, Mapping):
            errors.append(
                SettingError(
                    section,
                    f"must be a table ([{section}]), got {_show(body)}; the section's"
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
                errors.append(_unknown(key, SPECS))
            elif key == KEYMAP_KEY:
                values[section][name] = _parse_keymap(raw, fallback.ui.keymap, errors)
            else:
                try:
                    values[section][name] = spec.check(raw)
                except _Bad as err:
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
            SettingError(KEYMAP_KEY, f'must be a table of binding id = "key", got {_show(raw)}')
        )
        return fallback
    out: dict[str, str] = {}
    for binding, key in raw.items():
        try:
            out[binding] = _key_string(key)
        except _Bad as err:
            errors.append(SettingError(f"{KEYMAP_KEY}.{binding}", str(err)))
            if binding in fallback:
                out[binding] = fallback[binding]
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
        reason = f"cannot read {path}: {err.strerror or err}; {kept}"
        return fallback, [SettingError(FILE_KEY, reason)]
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        reason = f"{path} is not UTF-8 text (byte {err.start}); the file was not changed and {kept}"
        return fallback, [SettingError(FILE_KEY, reason)]
    except tomllib.TOMLDecodeError as err:
        return fallback, [_toml_error(path, err, f"the file was not changed and {kept}")]
    return parse_settings(data, previous)


def _toml_error(path: Path, err: tomllib.TOMLDecodeError, outcome: str) -> SettingError:
    message, line, column, where = str(err), None, None, ""
    match = _POSITION_RE.search(message)
    if match:
        line, column = int(match[1]), int(match[2])
        message = message[: match.start()]
        where = f" at line {line}, column {column}"
    return SettingError(
        FILE_KEY, f"{path} is not valid TOML{where}: {message}; {outcome}", line, column
    )


# ---- writing -------------------------------------------------------------------------------


def check_setting(key: str, value: Any) -> Any:
    """The normalised value for ``key``; raises :class:`InvalidSetting` naming key and reason.
    ``None`` means "unset" (the key is removed from the file and takes its default)."""
    return _validate_changes({key: value})[key]


def _validate_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    errors: list[SettingError] = []
    out: dict[str, Any] = {}
    for key, value in changes.items():
        spec = SPECS.get(key)
        if spec is None and key.startswith(KEYMAP_KEY + ".") and len(key) > len(KEYMAP_KEY) + 1:
            spec = SettingSpec(key, _key_string, "")  # one binding: "ui.keymap.<id>"
        if spec is None:
            errors.append(_unknown(key, SPECS))
            continue
        if value is None:
            out[key] = None
            continue
        try:
            out[key] = spec.check(value)
        except _Bad as err:
            errors.append(SettingError(key, str(err)))
    if errors:
        raise InvalidSetting(errors)
    return out


def save_setting(path: Path, key: str, value: Any) -> None:
    """Set one dotted key (``None`` removes it so it takes its default); see save_settings."""
    save_settings(path, {key: value})


def save_settings(path: Path, changes: Mapping[str, Any]) -> None:
    """Validate ``changes`` (dotted key -> value; ``None`` unsets), then write them into
    ``path`` keeping every comment, blank line and unknown key, atomically, mode 0600.

    Raises :class:`InvalidSetting` (an ``InvalidInput``) for a bad key or value, and
    ``InvalidInput`` when the existing file is not valid TOML; the file is unchanged then.
    """
    import tomlkit
    from tomlkit.exceptions import ParseError

    values = _validate_changes(changes)
    path = Path(path)
    ensure_private_dir(path.parent)
    target = path.resolve() if path.is_symlink() else path  # keep a dotfiles symlink a symlink
    try:
        old_text = read_regular(target, MAX_CONFIG_BYTES).decode("utf-8")
    except FileNotFoundError:
        old_text = None
    except OSError as err:
        reason = err.strerror or err
        raise InvalidInput(f"cannot read {path}: {reason}; the file was not changed") from err
    except UnicodeDecodeError as err:
        raise InvalidInput(f"cannot read {path}: {err}; the file was not changed") from err
    try:
        if old_text is not None:
            tomllib.loads(old_text)
        doc = tomlkit.parse(old_text if old_text is not None else _HEADER)
    except tomllib.TOMLDecodeError as err:
        outcome = "fix it in an editor first; the file was not changed"
        raise InvalidInput(str(_toml_error(path, err, outcome))) from err
    except ParseError as err:  # tomlkit stricter than tomllib: unlikely
        raise InvalidInput(f"{path}: {err}; the file was not changed") from err

    order = {key: i for i, key in enumerate(SPECS)}
    for key in sorted(values, key=lambda k: order.get(k, len(order))):
        value = values[key]
        section, name = key.split(".", 1)
        _apply(doc, section, name, value, tomlkit)

    new_text = tomlkit.dumps(doc)
    if new_text == old_text or (old_text is None and new_text == _HEADER):
        return  # nothing to change (e.g. unsetting keys of a file that does not exist)
    tomllib.loads(new_text)  # never write a file we could not read back
    write_private_atomic(target, new_text)


def _apply(doc: Any, section: str, name: str, value: Any, tomlkit: Any) -> None:
    if section not in doc:
        if value is None:
            return
        doc[section] = tomlkit.table(is_super_table=section == "ui" and name.startswith("keymap"))
    table = doc[section]
    if not isinstance(table, Mapping):
        raise InvalidInput(
            f"{section}: is not a table in the file; fix it in an editor first:"
            " the file was not changed"
        )
    if section == "ui" and name.startswith("keymap"):
        _apply_keymap(table, name, value, tomlkit)
        return
    if value is None:
        if name in table:
            del table[name]
        return
    if name in table and _same(_unwrap(table[name]), value):
        return  # unchanged: keep the user's formatting (120 stays 120, not 120.0)
    table[name] = value


def _apply_keymap(ui: Any, name: str, value: Any, tomlkit: Any) -> None:
    if name == "keymap":  # the whole table
        if value is None:
            if "keymap" in ui:
                del ui["keymap"]
            return
        if "keymap" not in ui:
            ui["keymap"] = tomlkit.table()
        table = ui["keymap"]
        if not isinstance(table, Mapping):
            ui["keymap"] = tomlkit.table()
            table = ui["keymap"]
        for binding in [b for b in table if b not in value]:
            del table[binding]
        for binding, key in value.items():
            if binding not in table or _unwrap(table[binding]) != key:
                table[binding] = key
        return
    binding = name.split(".", 1)[1]  # "keymap.<binding id>"
    if "keymap" not in ui:
        if value is None:
            return
        ui["keymap"] = tomlkit.table()
    table = ui["keymap"]
    if not isinstance(table, Mapping):
        raise InvalidInput(
            f"{KEYMAP_KEY}: is not a table in the file; fix it in an editor first:"
            " the file was not changed"
        )
    if value is None:
        if binding in table:
            del table[binding]
    elif binding not in table or _unwrap(table[binding]) != value:
        table[binding] = value


def _same(old: Any, new: Any) -> bool:
    return old == new and isinstance(old, bool) == isinstance(new, bool)


def _unwrap(item: Any) -> Any:
    return item.unwrap() if hasattr(item, "unwrap") else item
