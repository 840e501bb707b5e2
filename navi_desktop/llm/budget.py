"""Token budgets for requests: how long a prompt is, how much output a schema can need, and
the ``num_ctx`` / ``num_predict`` options that follow from them.

Stdlib only. Token counts are estimates from characters, set to err high: a prompt counted
short would be cut from the front by the server (instructions first), while one counted long
only costs a slightly larger context.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from navi_desktop.llm.errors import MessageTooLong, PromptTooLong

CHARS_PER_TOKEN = 3.2  # English prose is ~4 with Llama-style tokenizers; code and JSON less
JSON_CHARS_PER_TOKEN = 2.5  # structured output: quotes, braces and short keys
MESSAGE_OVERHEAD = 8  # role markers and separators of a chat template, per message
MIN_NUM_CTX = 4096  # current Ollama's default: chat and background work share one size
MIN_OUTPUT = 256  # the least output room worth asking for
MIN_REPLY_TOKENS = 32  # a chat prompt that leaves less than this for the reply is refused
MAX_CHARS_PER_TOKEN = 64  # longer than any token: an answer beyond num_predict × this ignored it
# Structured requests are background work: close to deterministic. A fixed seed makes a
# retry with the same strategy give the same answer, so retries change the strategy instead.
STRUCTURED_DEFAULTS: dict[str, Any] = {"temperature": 0.1, "top_p": 0.9, "seed": 42}
_WIDE = re.compile("[\u2e80-\U0010ffff]+")  # CJK and the scripts after it


def estimate_tokens(text: str) -> int:
    """An upper-leaning estimate: ~3.2 characters per token; CJK and other wide scripts one
    token per character."""
    # Counted in C: chunking and prompt fitting measure long texts many times over.
    wide = 0 if text.isascii() else sum(map(len, _WIDE.findall(text)))
    return math.ceil((len(text) - wide) / CHARS_PER_TOKEN) + wide + 1


def _message_tokens(message: Mapping[str, Any]) -> int:
    return estimate_tokens(str(message.get("content") or "")) + MESSAGE_OVERHEAD


def prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    return 16 + sum(map(_message_tokens, messages))


def schema_chars(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> int | None:
    """The longest JSON text (compact) that ``schema`` allows, or None when something in it is
    unbounded (an array without ``maxItems``, a string without ``maxLength`` or ``enum``)."""
    root = schema if root is None else root
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part, {}) if isinstance(node, Mapping) else {}
        schema = node if isinstance(node, Mapping) else {}
    if "enum" in schema:
        return max(len(json.dumps(v, ensure_ascii=False)) for v in schema["enum"])
    if "const" in schema:
        return len(json.dumps(schema["const"], ensure_ascii=False))
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        sizes = [schema_chars(o, root) for o in options]
        return None if None in sizes else max(s for s in sizes if s is not None)
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    if not kinds:
        return None
    sizes = [_type_chars(k, schema, root) for k in kinds]
    return None if None in sizes else max(s for s in sizes if s is not None)


def _type_chars(kind: str, schema: Mapping[str, Any], root: Mapping[str, Any]) -> int | None:
    if kind == "object":
        total = 2
        for name, sub in (schema.get("properties") or {}).items():
            size = schema_chars(sub, root)
            if size is None:
                return None
            total += len(json.dumps(name)) + 2 + size
        return total
    if kind == "array":
        items = schema.get("items")
        limit = schema.get("maxItems")
        if limit is None:
            return None
        size = schema_chars(items, root) if isinstance(items, Mapping) else 0
        return None if size is None else 2 + limit * (size + 2)
    if kind == "string":
        limit = schema.get("maxLength")
        # Escapes (\n, \") can double a character; a few per string is typical.
        return None if limit is None else 2 + math.ceil(limit * 1.1)
    return {"number": 24, "integer": 20, "boolean": 5, "null": 4}.get(kind, 24)


def unbounded_paths(schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Where ``schema`` lets a model write without end: arrays without ``maxItems``, strings
    without ``maxLength`` (enums excepted), numbers without ``minimum`` and ``maximum``."""
    found: list[str] = []
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    if "array" in kinds:
        if "maxItems" not in schema:
            found.append(path)
        if isinstance(items := schema.get("items"), Mapping):
            found += unbounded_paths(items, f"{path}[]")
    if "string" in kinds and "maxLength" not in schema and "enum" not in schema:
        found.append(path)
    if ("number" in kinds or "integer" in kinds) and not {"minimum", "maximum"} <= set(schema):
        found.append(path)
    for name, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, Mapping):
            found += unbounded_paths(sub, f"{path}.{name}")
    return found


def output_tokens(schema: Mapping[str, Any], fallback: int = 1024) -> int:
    """``num_predict`` for a reply constrained to ``schema``: room for its longest answer."""
    chars = schema_chars(schema)
    if chars is None:
        return fallback
    return math.ceil(chars / JSON_CHARS_PER_TOKEN) + 32


def context_size(needed: int, context_length: int | None) -> int:
    """``num_ctx`` for a request needing ``needed`` tokens: the next power of two from 4,096
    (few distinct sizes: Ollama reloads a model whose context size changes), never beyond the
    model's own context length."""
    size = MIN_NUM_CTX
    while size < needed:
        size *= 2
    if context_length:
        size = min(size, context_length)
    return size


def structured_options(
    messages: Sequence[Mapping[str, Any]],
    schema: Mapping[str, Any],
    context_length: int | None,
    given: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The options of a structured request: low temperature and a seed (unless ``given``
    says otherwise), ``num_predict`` sized to the schema and ``num_ctx`` to prompt + output,
    both within the model's context. Raises :class:`PromptTooLong`."""
    prompt = prompt_tokens(messages)
    want = int(given["num_predict"]) if given and "num_predict" in given else output_tokens(schema)
    if context_length and prompt + MIN_OUTPUT > context_length:
        raise PromptTooLong(prompt, context_length)
    if context_length:
        want = min(want, context_length - prompt)
    options = {**STRUCTURED_DEFAULTS, **(given or {})}
    options["num_predict"] = want
    options.setdefault("num_ctx", context_size(prompt + want, context_length))
    return options


def chat_request(
    messages: Sequence[Mapping[str, Any]],
    reply_tokens: int | None,
    context_length: int | None,
    given: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The messages and options of a chat reply: ``num_predict`` = the reply cap, and
    ``num_ctx`` large enough for the prompt plus a reply (up to 1,024 tokens of it), so the
    server does not cut the prompt from the front; a prompt beyond the model's context is
    fitted first (:func:`fit_messages`)."""
    room = min(reply_tokens or 1024, 1024)
    fitted, tokens = _fit(messages, context_length, room)
    # Only the instructions and the last message are left, and they do not fit (with a
    # little room to answer): the server would cut the instructions, and answer nonsense.
    if context_length and tokens - room + MIN_REPLY_TOKENS > context_length:
        raise MessageTooLong(tokens - room, context_length)
    options = dict(given or {})
    if reply_tokens:
        options.setdefault("num_predict", reply_tokens)
    options.setdefault("num_ctx", context_size(tokens, context_length))
    return fitted, options


def fit_messages(
    messages: Sequence[Mapping[str, Any]], context_length: int | None, reserve: int
) -> list[dict[str, Any]]:
    """``messages`` within ``context_length`` less ``reserve``, cut knowingly rather than by
    the server (which cuts the start: the instructions): a history message longer than half
    of it keeps its start and end, then the oldest history goes. The system prompt and the
    last message stay."""
    return _fit(messages, context_length, reserve)[0]


def _fit(
    messages: Sequence[Mapping[str, Any]], context_length: int | None, reserve: int
) -> tuple[list[dict[str, Any]], int]:
    """:func:`fit_messages`, and the fitted prompt's tokens plus ``reserve``; each message is
    measured once."""
    out = [dict(m) for m in messages]
    if not context_length:
        return out, prompt_tokens(out) + reserve
    limit = context_length - reserve
    last = len(out) - 1
    costs = []
    for i, m in enumerate(out):
        text = str(m.get("content") or "")
        if 0 < i < last and estimate_tokens(text) > limit // 2:
            keep = int(limit // 4 * CHARS_PER_TOKEN) // 2
            m["content"] = f"{text[:keep]} […] {text[-keep:]}"
        costs.append(_message_tokens(m))
    total = 16 + sum(costs)
    while total > limit:
        index = next((i for i in range(len(out) - 1) if out[i].get("role") != "system"), None)
        if index is None:
            break
        del out[index]
        total -= costs.pop(index)
    return out, total + reserve
