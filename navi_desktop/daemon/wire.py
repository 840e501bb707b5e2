"""What the daemon and its clients share on the socket: newline-delimited JSON-RPC 2.0 frames
and the error codes. Standard library only: the CLI imports the client at start."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from navi_desktop.terminal_text import SURROGATE

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
APP_ERROR = -32000
NOT_FOUND = -32001
ACCESS_DENIED = -32003
REQUEST_CANCELLED = -32800

# An incognito session's id: how a client tells it from a stored session's.
INCOGNITO_PREFIX = "incognito-"

# Deeper frames are refused before parsing: no method needs more, and deep nesting costs a
# recursive parse (Python raises RecursionError near 1000 levels).
MAX_DEPTH = 64


def envelope(method: str, params: Any = None, rid: int | str | None = None) -> dict[str, Any]:
    """A request with id ``rid``, or without one a notification; no ``params`` when None."""
    msg: dict[str, Any] = {"jsonrpc": "2.0"}
    if rid is not None:
        msg["id"] = rid
    msg["method"] = method
    if params is not None:
        msg["params"] = params
    return msg


def encode(msg: dict[str, Any]) -> bytes:
    """One frame: compact UTF-8 JSON and a newline. NaN and infinities are refused
    (``ValueError``): they are not JSON."""
    text = json.dumps(msg, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # a file name that is not UTF-8: JSON's escape carries it
        return escape_surrogates(text).encode("utf-8") + b"\n"


def escape_surrogates(json_text: str) -> str:
    """JSON text with each lone surrogate (a file name's bytes that are not UTF-8, as Python
    keeps them) written as JSON's escape: valid UTF-8, and read back to the same string."""
    return SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", json_text)


def add_error_data(exc: BaseException, **facts: Any) -> None:
    """Facts the error reply for ``exc`` carries in its ``data``, beside ``kind`` (e.g. that
    a chat message was stored before its reply failed). A fact told first stays: the code
    nearest to it tells it, and a caller's default does not undo it."""
    told = getattr(exc, "navi_error_data", None)
    if not isinstance(told, dict):
        told = {}
        exc.navi_error_data = told  # type: ignore[attr-defined]
    for key, value in facts.items():
        told.setdefault(key, value)


@contextmanager
def telling(**facts: Any) -> Iterator[None]:
    """Whatever fails inside tells ``facts`` in its error reply (:func:`add_error_data`)."""
    try:
        yield
    except BaseException as exc:
        add_error_data(exc, **facts)
        raise


def error_data(exc: BaseException) -> dict[str, Any]:
    """What :func:`add_error_data` told of ``exc`` (empty when nothing)."""
    told = getattr(exc, "navi_error_data", None)
    return dict(told) if isinstance(told, dict) else {}


class FrameError(ValueError):
    """A frame that is not one JSON value we accept; ``code`` is the JSON-RPC error code."""

    def __init__(self, message: str, code: int = PARSE_ERROR) -> None:
        super().__init__(message)
        self.code = code


# Brackets kept, as "[" and "]" (the depth does not depend on the kind); the rest deleted.
_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def too_deep(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether ``data`` nests arrays and objects more than ``limit`` deep (brackets inside
    strings do not count). Cheap: a frame with few brackets is not scanned at all, and each
    pass over the brackets alone peels off one level."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    # Drop escapes (a backslash always starts a two-byte one), then what is inside quotes.
    outside = b"".join(data.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')[::2])
    brackets = outside.translate(_BRACKETS, _NOT_BRACKET)
    too_many = b"[" * (limit + 1)
    for _ in range(limit):
        if not brackets:
            return False
        if too_many in brackets:
            return True
        inner = brackets.replace(b"[]", b"")  # the innermost level: one per pass
        if len(inner) == len(brackets):  # unbalanced: the parser will say where
            return False
        brackets = inner
    return bool(brackets)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise FrameError(f"parse error: the number {text[:40]} is out of range")
    return value


def _constant(name: str) -> Any:
    raise FrameError(f"parse error: {name} is not JSON")


def decode(data: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """One frame's JSON value. Raises :class:`FrameError` naming what is wrong: not UTF-8,
    invalid JSON, nested deeper than ``max_depth``, a number too long or out of range."""
    if too_deep(data, max_depth):
        raise FrameError(f"parse error: nested deeper than {max_depth} levels")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError(f"parse error: not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text, parse_float=_finite, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise FrameError(
            f"parse error: invalid JSON: {exc.msg} at line {exc.lineno} "
            f"column {exc.colno} (char {exc.pos})"
        ) from None
    except RecursionError:
        raise FrameError("parse error: nested too deeply") from None
    except FrameError:
        raise
    except ValueError as exc:  # an integer over Python's digit limit (4300)
        if "digits" in str(exc):
            raise FrameError("parse error: a number has too many digits") from None
        raise FrameError(f"parse error: {exc}") from None
