"""What each setting may hold: one check per dotted key (``SPECS``), shared by reading,
saving and the settings screen. A rejected value raises :class:`BadValue` with the reason."""

from __future__ import annotations

import contextlib
import difflib
import math
import string
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from navi_desktop.errors import InvalidInput
from navi_desktop.ollama_host import shown_url, valid_host
from navi_desktop.paths import check_profile_name

EMBEDDERS = ("ollama", "local", "none")
BACKENDS = ("sqlite", "postgres")
KEYMAP_KEY = "ui.keymap"
# Textual's themes and the app's binding ids, kept here so that every reader of the file (the
# CLI, the daemon) says a typo without loading Textual; a test holds both to the app's.
THEMES = (
    *("textual-dark", "textual-light", "nord", "gruvbox", "catppuccin-mocha", "dracula"),
    *("tokyo-night", "monokai", "flexoki", "catppuccin-latte", "catppuccin-frappe"),
    *("catppuccin-macchiato", "solarized-light", "solarized-dark", "rose-pine"),
    *("rose-pine-moon", "rose-pine-dawn", "atom-one-dark", "atom-one-light"),
    *("ansi-dark", "ansi-light"),
)
_BINDINGS = {
    "chat": "cancel copy model new rate regenerate sessions used",
    "daemon": "start",
    "entity": "merge rename",
    "memory": "accept confirm edit edit_accept expires export forget open_session pin reject"
    " search tab.facts tab.inbox tab.episodes tab.rules tab.entities",
    "message": "copy used",
    "mode": "chat memory settings",
    "prompt": "newline send",
    "sessions": "delete end export rename search",
    "settings": "models revert save test",
    "used": "close forget pin",
}
BINDING_IDS = frozenset(
    {"navi.help", "navi.incognito", "navi.quit"}
    | {f"navi.{group}.{name}" for group, names in _BINDINGS.items() for name in names.split()}
)
_MODIFIERS = {"ctrl", "alt", "shift", "meta", "super", "hyper"}
# The keys Textual names (its ``Keys``), and how it names a character: its Unicode name in
# lower case, "_" for spaces and hyphens, some shortened ("?" is "question_mark", "/" is
# "slash"). A test holds them to Textual's.
NAMED_KEYS = frozenset(
    "backspace delete down end enter escape home insert left pagedown pageup return right"
    " space tab up".split()
    + [f"f{n}" for n in range(1, 25)]
)
SHORTENED = {
    "commercial_at": "at",
    "hyphen_minus": "minus",
    "low_line": "underscore",
    "plus_sign": "plus",
    "reverse_solidus": "backslash",
    "solidus": "slash",
}


def character_key(character: str) -> str:
    """The name Textual gives the key that types ``character``."""
    name = unicodedata.name(character).lower().replace("-", "_").replace(" ", "_")
    return SHORTENED.get(name, name)


ASCII_KEYS = frozenset(character_key(c) for c in string.punctuation)


class BadValue(ValueError):
    """A value rejected; the message is the reason."""


def show_value(value: Any) -> str:
    """A value as an error shows it back: short, and a table or array named, not dumped."""
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
        raise BadValue(f"must be a non-empty string, got {show_value(value)}")
    return value.strip()


def _int_range(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise BadValue(f"must be an integer between {low} and {high}, got {show_value(value)}")
        return value

    return check


def _positive_number(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise BadValue(f"must be a number of seconds greater than 0, got {show_value(value)}")
    return float(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadValue(f"must be true or false, got {show_value(value)}")
    return value


def _choice(*options: str) -> Callable[[Any], str]:
    listed = ", ".join(repr(o) for o in options)

    def check(value: Any) -> str:
        if value not in options or not isinstance(value, str):
            raise BadValue(f"must be one of {listed}, got {show_value(value)}")
        return value

    return check


def _host(value: Any) -> str:
    if (host := valid_host(value)) is None:
        raise BadValue(
            "must be a URL like http://127.0.0.1:11434 or host:port, with no user or password"
            f" in it, got {_show_url(value)}"
        )
    return host


def _optional_host(value: Any) -> str | None:
    """A host, or None (the fallback) for an empty string: ``embedding_host = ""``."""
    return None if isinstance(value, str) and not value.strip() else _host(value)


def _dsn(value: Any) -> str | None:
    """A PostgreSQL URL, or None (NAVI_PG_DSN) for an empty string."""
    if isinstance(value, str) and not value.strip():
        return None
    if not isinstance(value, str) or not value.strip().startswith(("postgresql://", "postgres://")):
        raise BadValue(f"must be a URL like postgresql://user@host/navi, got {_show_url(value)}")
    return value.strip()


def _show_url(value: Any) -> str:
    """A rejected host or DSN as shown back: never with its password."""
    return show_value(shown_url(value) if isinstance(value, str) else value)


def _profile(value: Any) -> str:
    with contextlib.suppress(InvalidInput):
        if isinstance(value, str):
            return check_profile_name(value)
    raise BadValue(
        "must be 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit,"
        f" got {show_value(value)}"
    )


def key_string(value: Any) -> str:
    """One key or several, comma-separated (``"f9,alt+e"``): modifiers, then a key's name."""
    if isinstance(value, str) and all(_pressable(key) for key in value.strip().split(",")):
        return value.strip()
    hint = _closest_key(value)
    raise BadValue(
        'must be a key such as "ctrl+q", "alt+n", "f5" or "escape" (several: "f9,alt+e";'
        f" modifiers: {', '.join(sorted(_MODIFIERS))}), got {show_value(value)}{hint}"
    )


def _closest_key(value: Any) -> str:
    """ " (did you mean 'escape'?)" for the first key name of ``value`` that is a typo."""
    for key in value.split(",") if isinstance(value, str) else []:
        name = key.rpartition("+")[2]
        close = [] if _key_name(name) else difflib.get_close_matches(name, NAMED_KEYS, n=1)
        if close:
            return f" (did you mean {close[0]!r}?)"
    return ""


def _pressable(key: str) -> bool:
    *modifiers, name = key.split("+")
    return set(modifiers) <= _MODIFIERS and _key_name(name)


def _key_name(name: str) -> bool:
    """Whether Textual could name a key press ``name``: a character, a named key, or a
    character's name ("question_mark"). A typo ("escpae") was taken, and never fired."""
    if len(name) == 1 and name.isprintable() and not name.isspace():
        return True
    if name in NAMED_KEYS or name in ASCII_KEYS:
        return True
    if not name.isascii() or not name.replace("_", "").isalnum():
        return False
    spoken = name.replace("_", " ")  # another character's name: "latin_small_letter_e"
    for candidate in (spoken, spoken.replace(" ", "-")):
        with contextlib.suppress(KeyError, TypeError):  # TypeError: a named sequence
            return character_key(unicodedata.lookup(candidate)) == name
    return False


def binding_id(value: str) -> str:
    """A binding id of the keymap; a typo names the ids of its group (or the closest one)."""
    if value in BINDING_IDS:
        return value
    group = value.rsplit(".", 1)[0] + "."
    same = sorted(b for b in BINDING_IDS if b.startswith(group))
    close = difflib.get_close_matches(value, list(BINDING_IDS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    listed = f"the {group[:-1]} ones: {', '.join(same)}" if same else "see the README's keys table"
    raise BadValue(f"is not a binding id{hint}; {listed}")


def _theme(value: Any) -> str:
    name = _text(value)
    if name in THEMES:
        return name
    close = difflib.get_close_matches(name, THEMES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise BadValue(f"{show_value(value)} is not a theme{hint}; the themes: {', '.join(THEMES)}")


def _keymap_table(value: Any) -> dict[str, str]:
    """Whole-table check, used when saving ``ui.keymap``."""
    if not isinstance(value, Mapping):
        raise BadValue(f'must be a table of binding id = "key", got {show_value(value)}')
    out: dict[str, str] = {}
    for binding, key in value.items():
        if not isinstance(binding, str) or not binding:
            raise BadValue(f"binding ids must be non-empty strings, got {show_value(binding)}")
        try:
            out[binding_id(binding)] = key_string(key)
        except BadValue as err:
            raise BadValue(f"{binding!r} {err}") from None
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
        SettingSpec("ui.theme", _theme, "Textual theme name"),
        SettingSpec(KEYMAP_KEY, _keymap_table, "Key bindings: binding id = key(s)"),
    )
}
