"""Declared parameters for the daemon's RPC methods: one pydantic model per method, checked
before its handler runs.

Models are strict (no "5" for 5, no true for 1), bounded (every number, every string), refuse
text that is not valid Unicode and refuse unknown names. A bad request becomes ``InvalidInput``
(-32602) with one line that names the parameter and says what it must be, e.g.
``parameter 'limit' must be an integer from 1 to 1000, got 1000000000000000000000000000000``.

Daemon side only: pydantic costs a noticeable part of a start-up, and the CLI and TUI import
neither this module nor the ones built on it (a test checks).
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
import typing
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import PydanticCustomError

from navi_desktop.daemon.param_errors import Says, explain, safe, surrogate
from navi_desktop.errors import InvalidInput

INT64_MAX = 2**63 - 1  # SQLite's INTEGER
INT64_MIN = -(2**63)
JSON_DEPTH = 32  # how deep a free-form JSON value (a setting, a history entry) may nest

P = TypeVar("P", bound="Params")
Handler = Callable[[dict[str, Any], Any], Awaitable[Any]]


class Params(BaseModel):
    """Base of every method's parameters."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)


# -- value types ---------------------------------------------------------------------------


def _unicode(value: str) -> str:
    """Refuse lone surrogates: valid JSON ("\\ud800") but not text SQLite or a file can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PydanticCustomError("unicode", surrogate(value)) from None
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("blank", "must not be blank (only white space)")
    return value


def _iso_time(value: str) -> str:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise PydanticCustomError(
            "iso_time", "must be an ISO 8601 date or time (2025-01-31 or 2025-01-31T09:30Z)"
        ) from None
    return value


def text(max_chars: int, *, blank: bool = False, what: str = "a string") -> Any:
    """A string of at most ``max_chars`` characters, valid Unicode; not empty or only white
    space unless ``blank``."""
    if blank:
        says = f"{what} of at most {max_chars:,} characters"
        return Annotated[str, Field(max_length=max_chars), AfterValidator(_unicode), Says(says)]
    says = f"{what} of 1 to {max_chars:,} characters"
    return Annotated[
        str,
        Field(min_length=1, max_length=max_chars),
        AfterValidator(_unicode),
        AfterValidator(_not_blank),
        Says(says),
    ]


def file_path(max_chars: int = 4096) -> Any:
    """A file's path as the OS gives it: bytes that are not UTF-8 come as lone surrogates
    (Python's surrogateescape), which only a path may hold. Bounded here, not by ``Field``:
    pydantic's own length check refuses every lone surrogate."""

    def check(value: str) -> str:
        if not 1 <= len(value) <= max_chars:
            raise PydanticCustomError("length", f"must be 1 to {max_chars:,} characters long")
        try:
            encoded = os.fsencode(value)
        except UnicodeEncodeError:
            raise PydanticCustomError("unicode", surrogate(value)) from None
        if b"\0" in encoded:
            raise PydanticCustomError("nul", "must not hold a NUL character")
        return value

    return Annotated[
        str, AfterValidator(check), Says(f"a file path of 1 to {max_chars:,} characters")
    ]


def integer(low: int, high: int, what: str = "an integer") -> Any:
    return Annotated[int, Field(ge=low, le=high), Says(f"{what} from {low} to {_int(high)}")]


def number(low: float, high: float) -> Any:
    return Annotated[float, Field(ge=low, le=high), Says(f"a number from {low:g} to {high:g}")]


def _int(n: int) -> str:
    return "2^63-1" if n == INT64_MAX else str(n)


Unit = number(0.0, 1.0)  # a confidence, a strength
RowId = Annotated[
    int, Field(ge=1, le=INT64_MAX), Says("an id: an integer from 1 to 2^63-1")
]  # memories, messages: SQLite rowids
Timestamp = Annotated[
    str,
    Field(min_length=1, max_length=64),
    AfterValidator(_unicode),
    AfterValidator(_iso_time),
    Says("an ISO 8601 date or time (2025-01-31 or 2025-01-31T09:30Z)"),
]


def _json_problem(value: Any, path: str = "", depth: int = 0) -> tuple[str, str] | None:
    """(what makes ``value`` unfit to keep as JSON text, where), or None. ``JSON_DEPTH``
    bounds the recursion."""
    if depth > JSON_DEPTH:
        return f"nesting deeper than {JSON_DEPTH} levels", path
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"a lone surrogate (character {exc.start})", path
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            return "an integer outside -2^63 to 2^63-1", path
    elif isinstance(value, float):
        if not math.isfinite(value):
            return "a number that is not finite", path
    elif isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}[{safe(json.dumps(str(key), ensure_ascii=False))[:60]}]"
            if problem := _json_problem(key, where, depth) or _json_problem(item, where, depth + 1):
                return problem
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if problem := _json_problem(item, f"{path}[{i}]", depth + 1):
                return problem
    else:
        return f"a {type(value).__name__}, which is not JSON", path
    return None


def _plain_json(value: Any) -> Any:
    problem = _json_problem(value)
    if problem:
        what, where = problem
        raise PydanticCustomError(
            "json_value",
            "must be plain JSON: it holds {what}" + (" at {where}" if where else ""),
            {"what": what, "where": where},
        )
    return value


JsonValue = Annotated[Any, AfterValidator(_plain_json), Says("a JSON value")]
JsonObject = Annotated[dict[str, Any], AfterValidator(_plain_json), Says("a JSON object")]


# -- checking ------------------------------------------------------------------------------


def parse(model: type[P], data: Any) -> P:
    """``data`` checked against ``model``; ``InvalidInput`` with one line if it does not fit."""
    try:
        return model.model_validate({} if data is None else data)
    except ValidationError as exc:
        raise InvalidInput(explain(model, exc)) from None


# -- handlers ------------------------------------------------------------------------------


def takes(model: type[Params]) -> Callable[[Callable[..., Awaitable[Any]]], Any]:
    """Declare a handler's parameters: ``async def h([self,] params: Model, peer)`` is then
    called with the raw params dict (as a handler is), checked against ``model`` first."""

    def wrap(func: Callable[..., Awaitable[Any]]) -> Any:
        @functools.wraps(func)
        async def handler(*args: Any) -> Any:
            *head, params, peer = args
            return await func(*head, parse(model, params), peer)

        handler.params_model = model  # type: ignore[attr-defined]
        return handler

    return wrap


def model_of(handler: Any) -> type[Params] | None:
    """The parameter model a handler was declared with (through ``functools.partial`` too)."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    return getattr(handler, "params_model", None)


def require_models(handlers: dict[str, Any]) -> dict[str, Any]:
    """``handlers`` unchanged, once each is known to check its parameters: a method without a
    declared model is refused when it is registered, not found out by a user."""
    missing = sorted(name for name, h in handlers.items() if model_of(h) is None)
    if missing:
        raise TypeError(
            f"methods without a parameter model: {', '.join(missing)}; declare their parameters"
            " with navi_desktop.daemon.params.takes (or expose)"
        )
    return handlers


_BARE = {
    int: integer(INT64_MIN, INT64_MAX),
    str: text(1_000_000, blank=True),
}


def expose(func: Callable[..., Awaitable[Any]]) -> Handler:
    """Wrap ``async def f(*, a: str, b: int = 0, peer: Peer)`` as a handler: a model is built
    from the signature (a parameter named ``peer`` receives the caller and is no parameter).
    A bare ``int`` is bounded to SQLite's 64 bits and a bare ``str`` to valid Unicode."""
    sig = inspect.signature(func)
    hints = typing.get_type_hints(func, include_extras=True)
    fields: dict[str, Any] = {}
    for p in sig.parameters.values():
        if p.name == "peer":
            continue
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise TypeError(f"expose: {func.__name__} must take named parameters only ({p})")
        hint = hints.get(p.name, Any)
        if hint is int or hint is str:
            hint = _BARE[hint]
        fields[p.name] = (hint, ... if p.default is p.empty else p.default)
    model = create_model(f"{func.__name__}_params", __base__=Params, **fields)
    wants_peer = "peer" in sig.parameters

    async def handler(params: dict[str, Any], peer: Any) -> Any:
        values = parse(model, params)
        kwargs = {name: getattr(values, name) for name in model.model_fields}
        if wants_peer:
            kwargs["peer"] = peer
        return await func(**kwargs)

    handler.__name__ = getattr(func, "__name__", "handler")
    handler.__doc__ = func.__doc__
    handler.params_model = model  # type: ignore[attr-defined]
    return handler
