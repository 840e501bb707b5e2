"""A tool call's arguments checked against the tool's own JSON schema, before it runs.

Small models get arguments slightly wrong: an id as "12" or "#12", a category in capitals, a
null for an argument they mean to leave out. Those are taken as meant. Anything else gets one
line naming the argument and what it takes, so the model can call again.
"""

from __future__ import annotations

import re
from typing import Any

_INTEGER = re.compile(r"#?\s*(-?\d{1,12})")


class BadArguments(ValueError):
    """What is wrong with a call's arguments, said so that a model can fix it."""


def fit_arguments(spec: dict[str, Any], arguments: Any) -> dict[str, Any]:
    """``arguments`` made to fit ``spec`` (an entry of TOOLS), or :class:`BadArguments`."""
    params = spec["function"]["parameters"]
    properties: dict[str, dict[str, Any]] = params.get("properties", {})
    required: list[str] = params.get("required", [])
    if not isinstance(arguments, dict):
        raise BadArguments(f"arguments must be an object: {_takes(properties, required)}")
    given = {k: v for k, v in arguments.items() if v is not None}  # null: left out
    unknown = [k for k in given if k not in properties]
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise BadArguments(f"unknown argument {names}; {_takes(properties, required)}")
    for name in required:
        if name not in given:
            raise BadArguments(f"missing {name}: {_expects(properties[name])}")
    return {name: _fit(name, value, properties[name]) for name, value in given.items()}


def _fit(name: str, value: Any, prop: dict[str, Any]) -> Any:
    kind = prop.get("type")
    fitted: Any = value
    if kind == "integer":
        fitted = _integer(value)
    elif kind == "number":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        fitted = float(value) if ok else None
    elif kind == "string":
        # A number where text is meant is the text of that number ("value": 42).
        ok = isinstance(value, str | int | float) and not isinstance(value, bool)
        fitted = str(value) if ok else None
    elif kind == "boolean":
        text = str(value).strip().lower()
        fitted = value if isinstance(value, bool) else {"true": True, "false": False}.get(text)
    if fitted is None:
        raise BadArguments(f"{name} {_expects(prop)}, got {_shown(value)}")
    allowed = prop.get("enum")
    if allowed is not None:
        match = next((a for a in allowed if str(a).lower() == str(fitted).strip().lower()), None)
        if match is None:
            raise BadArguments(f"{name} must be {_choices(allowed)}, got {_shown(value)}")
        fitted = match
    return fitted


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and (m := _INTEGER.fullmatch(value.strip())):
        return int(m.group(1))
    return None


def _expects(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return f"must be {_choices(prop['enum'])}"
    kind = prop.get("type", "a value")
    what = {"integer": "an integer", "number": "a number", "string": "text"}.get(kind, kind)
    hint = f" ({prop['description']})" if prop.get("description") else ""
    return f"must be {what}{hint}"


def _choices(allowed: list[Any]) -> str:
    names = [str(a) for a in allowed]
    if len(names) <= 2:
        return " or ".join(names)
    return "one of " + ", ".join(names)


def _takes(properties: dict[str, Any], required: list[str]) -> str:
    if not properties:
        return "this tool takes no arguments"
    names = ", ".join(f"{n} (required)" if n in required else n for n in properties)
    return f"it takes {names}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
