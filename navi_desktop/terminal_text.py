"""Stored text made fit for a terminal. What Navi shows comes from conversations, a model,
imports and files; none of it may drive the terminal. An escape sequence in a reply or a
memory could set the window title, clear the screen or (OSC 52, in many terminals) write the
clipboard, and Textual passes ESC through to the terminal as it is.

Standard library only: the CLI and the app import it at startup.
"""

from __future__ import annotations

import re
from typing import Any

# C0/C1 control characters (and DEL), all but tab and newline; and the bidirectional
# embeddings, overrides and isolates, which reorder what is drawn after them: a reply could
# show a line that reads otherwise than it is ("Trojan Source").
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# One of them in a JSON frame, escaped or as UTF-8, or half a character (only ever escaped):
# a frame without any needs no walk.
FRAME_CONTROL = re.compile(
    rb"\\u00[0189][0-9a-fA-F]|\\u007[fF]|\x7f|\xc2[\x80-\x9f]|\\u[dD][89a-fA-F]"
    rb"|\\u20(?:2[a-eA-E]|6[6-9])|\xe2\x80[\xaa-\xae]|\xe2\x81[\xa6-\xa9]"
)


# Half a character: a file name's byte that is not UTF-8, as Python keeps it, or a JSON
# escape ("\ud800") decoded alone. No frame, file or SQLite row holds one; written to a
# terminal as an escape ("\udce9"), six cells where the layout counted one.
SURROGATE = re.compile("[\ud800-\udfff]")
# How JSON text writes one (also half of a pair): a text without it holds none once parsed.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def safe(text: str) -> str:
    """Text with control characters (other than tab and newline) shown as '?', and half a
    character as U+FFFD."""
    if text.isprintable():
        return text
    return SURROGATE.sub("\ufffd", CONTROL.sub("?", text))


def safe_data(value: Any) -> Any:
    """Decoded JSON with every string in it made ``safe``, keys included. Lists and dicts
    are changed in place."""
    kind = type(value)
    if kind is str:
        return safe(value)
    if kind is list:
        for i, item in enumerate(value):
            if (made := safe_data(item)) is not item:
                value[i] = made
    elif kind is dict:
        if not all(type(key) is not str or key.isprintable() for key in value):
            return {safe_data(key): safe_data(item) for key, item in value.items()}
        for key, item in value.items():
            if (made := safe_data(item)) is not item:
                value[key] = made
    return value
