"""A small JSON-schema checker for structured model output (no dependency).

Covers what extraction schemas use: ``type`` (one or a list), ``properties``, ``required``,
``additionalProperties: false``, ``items``, ``enum``, ``const``, ``minItems``/``maxItems``,
``minLength``/``maxLength``, ``minimum``/``maximum``, ``anyOf``/``oneOf``/``allOf``, and
local ``$ref`` (``#/$defs/...``, as Pydantic's ``model_json_schema()`` writes). Other keywords
are ignored. Ollama already constrains decoding to the schema; this catches what slips through.
:func:`clamp` brings numbers into their ``minimum``/``maximum`` first: a grammar bounds the
shape of a number, not its size (a confidence of 1597 comes through).
"""

from __future__ import annotations

from typing import Any


def _is_type(value: Any, name: str) -> bool:
    match name:
        case "object":
            return isinstance(value, dict)
        case "array":
            return isinstance(value, list)
        case "string":
            return isinstance(value, str)
        case "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "boolean":
            return isinstance(value, bool)
        case "null":
            return value is None
    return True


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for part in ref[2:].split("/"):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return node if isinstance(node, dict) else {}


def schema_error(
    value: Any, schema: dict[str, Any], root: dict[str, Any] | None = None, path: str = "$"
) -> str | None:
    """The first way ``value`` breaks ``schema``, as a short phrase; None when it conforms."""
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if "const" in schema and value != schema["const"]:
        return f"{path} is not {schema['const']!r}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path} is {value!r}, not one of {schema['enum']!r}"
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(value, n) for n in names):
            return f"{path} should be {' or '.join(names)}, got {type(value).__name__}"
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if options and all(schema_error(value, o, root, path) for o in options):
            return f"{path} matches none of the allowed shapes"
    for sub in schema.get("allOf", []):
        if problem := schema_error(value, sub, root, path):
            return problem
    if isinstance(value, dict):
        return _object_error(value, schema, root, path)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            return f"{path} has fewer than {schema['minItems']} items"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return f"{path} has more than {schema['maxItems']} items"
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                if problem := schema_error(item, items, root, f"{path}[{i}]"):
                    return problem
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            return f"{path} is shorter than {schema['minLength']} characters"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{path} is longer than {schema['maxLength']} characters"
    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{path} is below {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{path} is above {schema['maximum']}"
    return None


def _object_error(
    value: dict[str, Any], schema: dict[str, Any], root: dict[str, Any], path: str
) -> str | None:
    for key in schema.get("required", []):
        if key not in value:
            return f"{path} lacks required key {key!r}"
    properties = schema.get("properties", {})
    for key, item in value.items():
        if key in properties:
            if problem := schema_error(item, properties[key], root, f"{path}.{key}"):
                return problem
        elif schema.get("additionalProperties") is False:
            return f"{path} has unexpected key {key!r}"
        elif isinstance(extra := schema.get("additionalProperties"), dict) and (
            problem := schema_error(item, extra, root, f"{path}.{key}")
        ):
            return problem
    return None


def clamp(value: Any, schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """``value`` with every number that ``schema`` bounds (``minimum``/``maximum``) brought
    into range; everything else as it was. A new structure: the input is left alone."""
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        return {
            k: clamp(v, properties[k], root) if isinstance(properties.get(k), dict) else v
            for k, v in value.items()
        }
    if isinstance(value, list):
        items = schema.get("items")
        return [clamp(v, items, root) if isinstance(items, dict) else v for v in value]
    if _is_type(value, "number") and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return schema["minimum"]
        if "maximum" in schema and value > schema["maximum"]:
            return schema["maximum"]
    return value
