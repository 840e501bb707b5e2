"""Turning a pydantic ``ValidationError`` into one plain line for the caller: which parameter,
what it must be (in words, from the declared type) and what was sent, e.g.
``parameter 'limit' must be an integer from 1 to 1000, got integer -3``."""

from __future__ import annotations

import difflib
import json
import math
import types
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ValidationError


class Says:
    """What a value must be, in words: kept in ``Annotated`` metadata for error messages."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def surrogate(value: Any) -> str:
    try:
        str(value).encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"must be valid Unicode text: it holds a lone surrogate at character {exc.start}"
    return "must be valid Unicode text"


def explain(model: type[BaseModel], exc: ValidationError) -> str:
    """One plain line for a ``ValidationError``: the first problem, and how many others."""
    # An unknown name first: a misspelt parameter also shows up as a missing one.
    errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")
    line = _explain_one(model, errors[0])
    if len(errors) > 1:
        more = len(errors) - 1
        line += f" (and {more} more problem{'s' if more > 1 else ''})"
    return line


_OWN_ERRORS = {"unicode", "blank", "iso_time", "json_value", "params"}


def _explain_one(model: type[BaseModel], err: Any) -> str:
    loc = tuple(err["loc"])
    kind = err["type"]
    if not loc:
        if kind in _OWN_ERRORS:  # a check across parameters: its message says it all
            return safe(err["msg"])
        return f"the parameters must be an object of named values, got {show(err['input'])}"
    name = _path(loc, model)
    if kind == "missing":
        return f"missing required parameter {name!r}"
    if kind == "extra_forbidden":
        owner = _resolve(model, loc[:-1])
        known = list(owner.model_fields) if _is_model(owner) else []
        hint = difflib.get_close_matches(str(loc[-1]), known, n=1)
        expected = ", ".join(known) or "none"
        did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ""
        return f"unknown parameter {name!r}{did_you_mean} (expected: {expected})"
    if kind in _OWN_ERRORS:
        return f"parameter {name!r} {safe(err['msg'])}"
    if kind == "string_unicode":  # pydantic's own check of a bounded string
        return f"parameter {name!r} {surrogate(err['input'])}"
    if loc[-1] == "[key]":  # a dict's key: loc is (..., the key, "[key]")
        keys = _resolve(model, loc[:-2])
        want = describe(typing.get_args(_strip(keys))[0]) if keys is not None else "a string"
        where = _path(loc[:-2], model)
        return f"parameter {where!r} must have keys that are each {want}, got {show(loc[-2])}"
    hint = _resolve(model, loc)
    want = describe(hint) if hint is not None else safe(err["msg"]).lower()
    return f"parameter {name!r} must be {want}, got {show(err['input'])}"


def _path(loc: tuple[Any, ...], model: type[BaseModel]) -> str:
    """``data.memories[3].pinned``, ``changes["ui.theme"]``: a field, an item, a key."""
    out = ""
    for i, part in enumerate(loc):
        parent = _strip(_resolve(model, loc[:i]))
        if isinstance(part, int):
            out += f"[{part}]"
        elif typing.get_origin(parent) is dict:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
        else:
            out += ("." if out else "") + str(part)
    return safe(out)


def safe(s: str) -> str:
    """Text fit for a reply frame: a lone surrogate becomes an escape."""
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _strip(tp: Any) -> Any:
    """``tp`` without ``Annotated`` and without ``| None``."""
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            rest = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(rest) != 1:
                return tp
            tp = rest[0]
        else:
            return tp


def _resolve(model: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """The declared type at ``loc`` (with its ``Annotated`` metadata), or None if unknown."""
    tp: Any = model
    for part in loc:
        base = _strip(tp)
        if _is_model(base) and isinstance(part, str) and part in base.model_fields:
            field = base.model_fields[part]
            tp = field.annotation
            if field.metadata:
                tp = Annotated[(tp, *field.metadata)]  # type: ignore[valid-type]
        elif typing.get_origin(base) is list and isinstance(part, int):
            tp = typing.get_args(base)[0]
        elif typing.get_origin(base) is dict and typing.get_args(base):
            tp = typing.get_args(base)[1]
        else:
            return None
    return tp


def describe(tp: Any) -> str:
    """What a value of type ``tp`` must be, in words."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            return " or ".join(describe(a) for a in args)
        tp = rest[0]
    return _describe_one(tp)  # "or null" left unsaid: it reads badly and is no fix


def _describe_one(tp: Any) -> str:
    bounds: list[str] = []
    if typing.get_origin(tp) is Annotated:
        base, *meta = typing.get_args(tp)
        for item in meta:
            if isinstance(item, Says):
                return item.text
        for item in meta:
            for attr in ("ge", "le", "max_length"):
                if getattr(item, attr, None) is not None:
                    bounds.append(f"{attr} {getattr(item, attr)}")
        tp = base
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(v) for v in typing.get_args(tp))
    if origin is list:
        return f"a list of {describe(typing.get_args(tp)[0])} values"
    if origin is dict or tp is dict:
        return "an object"
    if _is_model(tp):
        return "an object with " + ", ".join(tp.model_fields)
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        tp, "a JSON value"
    )
    return words + (f" ({', '.join(bounds)})" if bounds else "")


def show(value: Any) -> str:
    """A value as a reply can quote it: its JSON type and a short, safe rendering."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"integer {value}" if abs(value) < 10**60 else "an integer of more than 60 digits"
    if isinstance(value, float):
        return f"number {value!r}" if math.isfinite(value) else "a number that is not finite"
    if isinstance(value, str):
        return f"string {_brief(value)}"
    if isinstance(value, list):
        return f"array {_brief(value)}"
    if isinstance(value, dict):
        return f"object {_brief(value)}"
    return type(value).__name__


def _brief(value: Any, depth: int = 0) -> str:
    if isinstance(value, str):
        quoted = json.dumps(value[:40] + ("…" if len(value) > 40 else ""), ensure_ascii=False)
        return safe(quoted)
    if isinstance(value, list):
        if depth >= 2:
            return "[…]"
        items = [_brief(v, depth + 1) for v in value[:3]]
        return "[" + ", ".join(items + (["…"] if len(value) > 3 else [])) + "]"
    if isinstance(value, dict):
        if depth >= 2:
            return "{…}"
        pairs = [f"{_brief(str(k))}: {_brief(v, depth + 1)}" for k, v in list(value.items())[:3]]
        return "{" + ", ".join(pairs + (["…"] if len(value) > 3 else [])) + "}"
    return show(value) if not isinstance(value, int | float) else safe(repr(value))[:60]
