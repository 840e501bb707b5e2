"""From one request frame to its reply: parsing, the JSON-RPC shape, the handler call and
the mapping of errors to codes. Every frame gets exactly one reply (or none, for a client's
notification), whatever it holds."""

from __future__ import annotations

import asyncio
import difflib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from navi_desktop.daemon.connection import Connection, Peer, error_frame, error_reply
from navi_desktop.daemon.wire import (
    APP_ERROR,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NOT_FOUND,
    REQUEST_CANCELLED,
    FrameError,
    decode,
    encode,
    error_data,
)
from navi_desktop.errors import InvalidInput, NaviError, NotFound

log = logging.getLogger("navi_desktop.daemon.rpc")

Handler = Callable[[dict[str, Any], Peer], Awaitable[Any]]
MAX_NAME_IN_MESSAGE = 100  # longer method names are cut in error messages
# The code a handler's NaviError is answered with: that of the first class it belongs to.
_NAVI_CODES = ((NotFound, NOT_FOUND), (InvalidInput, INVALID_PARAMS), (NaviError, APP_ERROR))

_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def _json_type(value: Any) -> str:
    for cls, name in _JSON_TYPES.items():
        if type(value) is cls:
            return name
    return type(value).__name__


def _valid_id(rid: Any) -> bool:
    if rid is None or type(rid) is int:
        return True
    if not isinstance(rid, str):
        return False
    try:
        rid.encode("utf-8")  # a lone surrogate could not be sent back
    except UnicodeEncodeError:
        return False
    return True


class Dispatcher:
    """Answers frames with the methods in ``_handlers``."""

    _handlers: dict[str, Handler]

    async def _handle(self, conn: Connection, line: bytes) -> None:
        try:
            data = await self._process(conn.peer, line)
        except Exception:  # a bug here must still answer, and not kill the connection
            log.exception("internal error while handling a request")
            data = error_frame(None, INTERNAL_ERROR, "internal error (see the daemon log)")
        if data is not None:
            conn.reply(data)

    async def _process(self, peer: Peer, line: bytes) -> bytes | None:
        try:
            msg = decode(line)
        except FrameError as exc:
            return error_frame(None, exc.code, str(exc))
        if not isinstance(msg, dict):
            what = "batch requests are not supported" if isinstance(msg, list) else None
            return error_frame(
                None,
                INVALID_REQUEST,
                "invalid request: " + (what or f"expected a JSON object, got {_json_type(msg)}"),
            )
        is_call = "id" in msg
        rid = msg.get("id")
        if not _valid_id(rid):
            return error_frame(
                None,
                INVALID_REQUEST,
                "invalid request: 'id' must be a string (valid Unicode), an integer or"
                f" null, got {_json_type(rid)}",
            )
        problem = self._shape_problem(msg)
        if problem is not None:
            return error_frame(rid, INVALID_REQUEST, f"invalid request: {problem}")
        method: str = msg["method"]
        params: dict[str, Any] = msg.get("params") or {}
        response = await self._call(peer, rid, method, params)
        if not is_call:  # a notification from the client: no reply, errors only logged
            if "error" in response:
                log.info("notification %s failed: %s", method, response["error"]["message"])
            return None
        try:
            return encode(response)
        except (TypeError, ValueError, RecursionError) as exc:
            log.error("result of %s is not JSON-serialisable: %s", method, exc)
            return error_frame(
                rid,
                INTERNAL_ERROR,
                f"internal error: the result of {method} could not be encoded as JSON",
                type(exc).__name__,
            )

    @staticmethod
    def _shape_problem(msg: dict[str, Any]) -> str | None:
        if msg.get("jsonrpc", "2.0") != "2.0":
            return "'jsonrpc' must be \"2.0\""
        if "method" not in msg:
            return "missing 'method'"
        if not isinstance(msg["method"], str) or not msg["method"]:
            return f"'method' must be a non-empty string, got {_json_type(msg['method'])}"
        params = msg.get("params")
        if params is not None and not isinstance(params, dict):
            return f"'params' must be an object (named parameters), got {_json_type(params)}"
        return None

    async def _call(
        self, peer: Peer, rid: Any, method: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        handler = self._handlers.get(method)
        if handler is None:
            if len(method) > MAX_NAME_IN_MESSAGE:  # no fuzzy matching on a long string
                return error_reply(rid, METHOD_NOT_FOUND, f"unknown method {method[:40]!r}...")
            hint = difflib.get_close_matches(method, list(self._handlers), n=1)
            message = f"unknown method {method!r}" + (
                f" (did you mean {hint[0]!r}?)" if hint else ""
            )
            return error_reply(rid, METHOD_NOT_FOUND, message)
        try:
            result = await handler(params, peer)
        except (asyncio.CancelledError, Exception) as exc:
            kind = type(exc).__name__
            if isinstance(exc, asyncio.CancelledError):
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # this request itself is being cancelled (connection closed, stop())
                code, message, kind = REQUEST_CANCELLED, f"{method} was cancelled", "Cancelled"
            elif isinstance(exc, NaviError):
                code = next(c for cls, c in _NAVI_CODES if isinstance(exc, cls))
                message = str(exc)
            else:  # parameters are checked by each method's model (params.py)
                log.exception("internal error in %s", method)
                code = INTERNAL_ERROR
                message = f"internal error in {method}: {kind} (see the daemon log)"
            return error_reply(rid, code, message, kind, error_data(exc))
        return {"jsonrpc": "2.0", "id": rid, "result": result}
