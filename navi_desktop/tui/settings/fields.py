"""The settings form's fields: which widget shows each key, and how its text becomes a value.

No widgets here, only the conversions, so they are testable alone. A value the user typed is
checked with the same ``SPECS[key].check`` the daemon uses, so the reason shown under a field
is the one a save would give.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from navi_desktop.config_specs import SPECS

TEXT = "text"  # Input; an empty one means "unset" when optional
INTEGER = "integer"  # Input holding a whole number
NUMBER = "number"  # Input holding a number
SWITCH = "switch"
CHOICE = "choice"  # Select of fixed options
MODEL = "model"  # Select of the models installed in Ollama
SAME = "same as Host"  # what an empty embedding host means (unless NAVI_EMBEDDING_HOST is set)


@dataclass(frozen=True)
class Field:
    key: str
    label: str
    kind: str
    optional: bool = False  # empty text unsets the key (it takes its default)
    placeholder: str = ""

    @property
    def help(self) -> str:
        return SPECS[self.key].help

    @property
    def widget_id(self) -> str:
        return "f-" + self.key.replace(".", "-").replace("_", "-")


# (section title, fields) in the order they are shown.
SECTIONS: tuple[tuple[str, tuple[Field, ...]], ...] = (
    (
        "Ollama",
        (
            Field("ollama.host", "Host", TEXT, optional=True, placeholder="http://127.0.0.1:11434"),
            Field("ollama.chat_model", "Chat model", MODEL),
            Field("ollama.embedding_host", "Embedding host", TEXT, optional=True, placeholder=SAME),
            Field("ollama.embedding_model", "Embedding model", MODEL),
            Field("ollama.timeout_s", "Timeout (seconds)", NUMBER),
            Field("ollama.reply_max_tokens", "Reply limit (tokens)", INTEGER),
        ),
    ),
    (
        "Memory",
        (
            Field("memory.profile", "Profile", TEXT, optional=True, placeholder="OS user name"),
            Field("memory.budget_tokens", "Budget (tokens)", INTEGER),
            Field("memory.inactivity_timeout_min", "Inactivity (minutes)", INTEGER),
            Field("memory.embedder", "Embedder", CHOICE),
        ),
    ),
    (
        "Incognito",
        (
            Field("incognito.read_memory", "Read memory", SWITCH),
            Field("incognito.start_incognito", "Start incognito", SWITCH),
        ),
    ),
    ("Appearance", (Field("ui.theme", "Theme", CHOICE),)),
)
FIELDS: dict[str, Field] = {f.key: f for _, fields in SECTIONS for f in fields}


def to_widget(field: Field, value: Any) -> Any:
    """What the widget shows for a setting's value."""
    if field.kind in (TEXT, INTEGER, NUMBER):
        if value is None:
            return ""
        if field.kind == NUMBER and isinstance(value, float) and value.is_integer():
            return str(int(value))  # 120, not 120.0
        return str(value)
    return value


def from_widget(field: Field, raw: Any) -> Any:
    """The setting's value for what the widget holds (``None`` unsets an optional key);
    raises ``ValueError`` whose message is the reason it is not valid."""
    if field.kind in (TEXT, INTEGER, NUMBER):
        text = str(raw).strip()
        if not text:
            if field.optional:
                return None
            if field.kind == TEXT:
                raise ValueError("cannot be empty")
        raw = _number(text, field.kind) if field.kind != TEXT else text
    return SPECS[field.key].check(raw)


def _number(text: str, kind: str) -> Any:
    """A number from text; text that is none is left for the check to reject by name."""
    try:
        return int(text)
    except ValueError:
        pass
    if kind == NUMBER:
        try:
            return float(text)
        except ValueError:
            pass
    return text
