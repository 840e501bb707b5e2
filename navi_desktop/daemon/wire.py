"""What the daemon and its clients share on the socket: newline-delimited JSON-RPC 2.0 frames
and the error codes. Standard library only: the CLI imports the client at start."""

from __future__ import annotations

import json
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
APP_ERROR = -32000
NOT_FOUND = -32001
ACCESS_DENIED = -32003
REQUEST_CANCELLED = -32800


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
    return text.encode("utf-8") + b"\n"
