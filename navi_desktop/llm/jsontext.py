"""Reading JSON out of what a model wrote: prose around it, or an answer cut off mid-way.

Stdlib only. With ``format`` Ollama's grammar rules out prose, but not every server applies
it, and ``num_predict`` can still cut an answer short: then the items that were complete
are kept and the cut one is not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from navi_desktop.terminal_text import SURROGATE, SURROGATE_ESCAPE

_DECODER = json.JSONDecoder()
_CLOSE = {"{": "}", "[": "]"}
_START = re.compile(r"[{\[]")
# What a parse can raise besides a syntax error (JSONDecodeError is a ValueError): nesting
# deeper than the parser goes, a number of more than 4,300 digits.
UNREADABLE = (ValueError, RecursionError)


@dataclass(frozen=True)
class Found:
    value: Any
    prose: bool = False  # text around the JSON was ignored
    cut: bool = False  # the JSON was incomplete; only whole items were kept


def whole(text: str) -> str:
    """A model's text as valid Unicode. JSON lets a server send a lone surrogate ("\\ud800"),
    which no socket frame, file or SQLite row can hold: it becomes U+FFFD here, where the
    model's text comes in, not an error wherever it goes next."""
    return SURROGATE.sub("\ufffd", text) if SURROGATE.search(text) else text


def whole_value(value: Any) -> Any:
    """``value`` (fresh from a JSON parse: changed in place) with every string in it, keys
    too, ``whole``. Without recursion: a model's JSON may nest as deep as the parser goes."""
    if isinstance(value, str):
        return whole(value)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in [k for k in item if SURROGATE.search(k)]:
                item[whole(key)] = item.pop(key)
            pairs: Any = item.items()
        elif isinstance(item, list):
            pairs = enumerate(item)
        else:
            continue
        for key, v in list(pairs):
            if isinstance(v, str):
                item[key] = whole(v)
            elif isinstance(v, (dict, list)):
                stack.append(v)
    return value


def find_json(text: str, *, salvage: bool = False) -> Found | None:
    """The JSON value in ``text``: the whole text, else the first object or array in it (text
    before and after ignored), else — with ``salvage`` — the longest complete prefix of a cut
    object, closed. None when there is none. Its strings are ``whole``: the model's JSON is
    a second layer of escapes, where a lone surrogate can hide from the first."""
    found = _find(text, salvage)
    if found is not None and SURROGATE_ESCAPE.search(text):
        return Found(whole_value(found.value), found.prose, found.cut)
    return found


def _find(text: str, salvage: bool) -> Found | None:
    stripped = text.strip()
    try:
        return Found(json.loads(stripped))
    except UNREADABLE:
        pass
    first = _START.search(text)
    if first is None:
        return None
    start = first.start()
    try:
        value, _ = _DECODER.raw_decode(text, start)
        return Found(value, prose=True)
    except UNREADABLE:
        pass
    if not salvage:
        return None
    closed = _close_prefix(text, start)
    if closed is None:
        return None
    return Found(closed, prose=bool(text[:start].strip()), cut=True)


def _close_prefix(text: str, start: int) -> Any:
    """Cut ``text`` after the last complete value inside the outer container and close what
    is still open; the longest such prefix that parses."""
    stack: list[str] = []
    ends: list[tuple[int, str]] = []  # (index after a closing bracket, closers still needed)
    in_string = escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append(_CLOSE[ch])
        elif ch in "}]":
            if not stack:
                break
            stack.pop()
            if not stack:
                break  # the outer value was complete: raw_decode would have taken it
            ends.append((i + 1, "".join(reversed(stack))))
    for end, closers in reversed(ends[-200:]):
        try:
            return json.loads(text[start:end] + closers)
        except UNREADABLE:
            continue
    return None


def why_not_json(text: str, done_reason: str | None) -> str:
    """Why a structured reply gave no JSON, in words for the error."""
    if done_reason == "length":
        return "JSON cut off at the output-token limit"
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return f"text that is not valid JSON ({exc.msg} at character {exc.pos})"
    except RecursionError:
        return "JSON nested too deeply to read"
    except ValueError:
        return "JSON with a number too long to read"
    return "text that is not valid JSON"
