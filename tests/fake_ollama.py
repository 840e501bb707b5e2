"""A fake Ollama HTTP server on loopback, stdlib asyncio only, speaking Ollama's wire format.

Three ways to run it:

* on the test's event loop: ``async with FakeOllama(models) as fake: ... fake.url``;
* in its own thread, for synchronous tests (Textual snapshots):
  ``ThreadedFakeOllama(models)`` with ``start()`` / ``stop()`` (or ``with``) and ``.url``;
* by hand: ``python tests/fake_ollama.py --port 11435``, then ``OLLAMA_HOST=127.0.0.1:11435``.

Scripting: ``models`` (name, capabilities, embedding size); ``script(Reply(...), ...)`` queues
chat replies (streamed in word chunks, thinking, tool calls, an error line mid-stream, a delay
per chunk, a reply that never finishes); ``default_reply`` answers when the queue is empty
(a ``Reply`` or a function of the request body). ``requests`` records every request
(with ``received_at``, its arrival time);
``fail_status`` makes every API call fail; ``go_down()`` / ``come_up()`` refuse connections;
``path_replies`` answers a path (e.g. "/api/embed") with a ``Reply`` instead: its ``status``,
its ``raw`` bytes (and ``endless``), or nothing at all (``hang``).

Like Ollama with a small model, it bounds what a model sees and writes (one token = four
characters here): a prompt longer than ``num_ctx`` (default ``default_num_ctx``, 4,096) is cut
from the front — oldest messages first, then the start of what is left, instructions
included — and the responder sees the cut prompt (``Request.fit`` says what was cut); a reply
stops at ``num_predict`` tokens, or when the context is full, with ``done_reason`` "length".
:func:`endless` answers like a small model under a JSON grammar: items until ``maxItems``,
or until it runs out of room.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import itertools
import json
import math
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any


@dataclass
class FakeModel:
    name: str
    capabilities: tuple[str, ...] = ("completion", "tools")
    family: str = "llama"
    parameter_size: str = "3.2B"
    quantization: str = "Q4_K_M"
    size: int = 2_019_393_189
    embed_dim: int = 8
    context_length: int = 131072

    @property
    def full_name(self) -> str:
        return self.name if ":" in self.name else f"{self.name}:latest"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.full_name.encode()).hexdigest()


DEFAULT_MODELS = (
    FakeModel("llama3.2"),
    FakeModel("qwen3", ("completion", "tools", "thinking"), "qwen3", "8.2B", size=5_225_387_923),
    FakeModel("gemma2", ("completion",), "gemma2", "2.6B", size=1_629_518_495),
    FakeModel("nomic-embed-text", ("embedding",), "nomic-bert", "137M", "F16", 274_302_450, 768),
)


@dataclass
class Reply:
    """One scripted chat reply. ``chunks`` overrides the default split of ``content`` into
    words. ``status`` answers with an HTTP error instead; ``error`` sends an error line after
    the chunks; ``hang`` never finishes. ``thinking`` is sent only when the request asks."""

    content: str = ""
    chunks: list[str] | None = None
    thinking: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None
    status: int | None = None
    delay: float = 0.0
    hang: bool = False
    done_reason: str = "stop"
    # sent as the whole reply (malformed replies): a dict as JSON, bytes as they are
    raw: dict[str, Any] | bytes | None = None
    # after ``raw`` bytes (a start), these are sent again and again in a chunked body, until
    # the client hangs up or ``repeat`` times (a server that never ends a line or a body)
    endless: bytes | None = None
    repeat: int | None = None
    headers: dict[str, str] = field(default_factory=dict)  # more headers for ``raw`` bytes

    def pieces(self) -> list[str]:
        if self.chunks is not None:
            return list(self.chunks)
        return re.findall(r"\S+\s*|\s+", self.content)


Responder = Reply | Callable[[dict[str, Any]], Reply]


@dataclass
class Request:
    method: str
    path: str
    body: Any
    # time.perf_counter() when the whole request had been read (for latency benchmarks)
    received_at: float = field(default_factory=time.perf_counter)
    # /api/chat: num_ctx, prompt_tokens (before any cut), dropped_messages, cut_tokens,
    # kept_tokens (after the cut)
    fit: dict[str, int] = field(default_factory=dict)


def fake_vector(model: str, text: str, dim: int, keep: int | None = None) -> list[float]:
    """The deterministic, L2-normalised vector the fake returns for ``text``; ``keep`` cuts it
    to fewer dimensions first (the ``dimensions`` request option)."""
    rng = random.Random(hashlib.sha256(f"{model}\0{text}".encode()).digest())
    raw = [rng.gauss(0.0, 1.0) for _ in range(dim)][:keep]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class _Ndjson:
    """A chunked ``application/x-ndjson`` response that notices when the client goes away."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.started = False
        # The client sends nothing while it reads a response, so EOF here means it hung up.
        self.gone = asyncio.ensure_future(reader.read(1))
        # A reset instead of a clean EOF is a hang-up too, not an error to report.
        self.gone.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def pause(self, seconds: float) -> bool:
        if seconds > 0 and not self.gone.done():
            await asyncio.wait({self.gone}, timeout=seconds)
        return not self.gone.done()

    async def send(self, obj: dict[str, Any]) -> bool:
        if self.gone.done():
            return False
        if not self.started:
            self.started = True
            self.writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
        data = json.dumps(obj).encode() + b"\n"
        self.writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        try:
            await self.writer.drain()
        except ConnectionError:
            return False
        return True

    async def end(self) -> None:
        self.gone.cancel()
        # Let the cancelled read finish before the connection reads its next request.
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.gone
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()


class FakeOllama:
    def __init__(
        self,
        models: tuple[FakeModel, ...] | list[FakeModel] = DEFAULT_MODELS,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        version: str = "0.12.3",
        default_reply: Responder | None = None,
    ) -> None:
        self.models = {m.full_name: m for m in models}
        self.host = host
        self.port = port
        self.version = version
        self.default_reply: Responder = default_reply or Reply("Hello from the fake Ollama.")
        self.replies: deque[Responder] = deque()
        self.requests: list[Request] = []
        self.fail_status: int | None = None
        self.fail_message = "fake Ollama failure"
        self.pull_missing: set[str] = set()  # names the "registry" does not have
        self.path_replies: dict[str, Reply] = {}  # path -> the Reply that answers it instead
        self.disconnects = 0  # streams the client closed before they ended
        self.default_num_ctx = 4096  # Ollama's, for requests that do not say
        # One chat request at a time, as Ollama runs one model: the rest wait their turn.
        self.serial = False
        self._one_at_a_time = asyncio.Lock()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def script(self, *replies: Responder) -> None:
        self.replies.extend(replies)

    def bodies(self, path: str = "/api/chat") -> list[Any]:
        return [r.body for r in self.requests if r.path == path]

    async def start(self) -> FakeOllama:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Stop listening and close every connection (3.11's ``wait_closed`` does not)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    go_down = stop

    async def come_up(self) -> None:
        await self.start()

    async def __aenter__(self) -> FakeOllama:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def wait_for_disconnect(self, count: int = 1, timeout: float = 2.0) -> None:
        async with asyncio.timeout(timeout):
            while self.disconnects < count:
                await asyncio.sleep(0.005)

    # ---- HTTP -------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while (request := await _read_request(reader)) is not None:
                if not await self._dispatch(request, reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        except asyncio.CancelledError:
            pass  # stop() ends connections this way; re-raising makes asyncio log a traceback
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _dispatch(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        self.requests.append(request)
        if request.method in ("GET", "HEAD") and request.path == "/":
            return await _send(writer, 200, b"Ollama is running", "text/plain; charset=utf-8")
        if self.fail_status is not None:
            return await _error(writer, self.fail_status, self.fail_message)
        if (scripted := self.path_replies.get(request.path)) is not None:
            return await self._as_scripted(scripted, reader, writer)
        routes = {
            ("GET", "/api/version"): self._version,
            ("GET", "/api/tags"): self._tags,
            ("POST", "/api/show"): self._show,
            ("POST", "/api/chat"): self._chat,
            ("POST", "/api/embed"): self._embed,
            ("POST", "/api/pull"): self._pull,
        }
        route = routes.get((request.method, request.path))
        if route is None:
            return await _send(writer, 404, b"404 page not found", "text/plain")
        body = request.body if isinstance(request.body, dict) else {}
        return await route(body, reader, writer)

    def _find(self, name: str) -> FakeModel | None:
        return self.models.get(name if ":" in name else f"{name}:latest")

    # ---- endpoints ------------------------------------------------------------------------

    async def _version(self, body: dict, reader: Any, writer: asyncio.StreamWriter) -> bool:
        return await _json(writer, 200, {"version": self.version})

    async def _tags(self, body: dict, reader: Any, writer: asyncio.StreamWriter) -> bool:
        models = [
            {
                "name": m.full_name,
                "model": m.full_name,
                "modified_at": "2025-01-01T00:00:00Z",
                "size": m.size,
                "digest": m.digest,
                "details": _details(m),
            }
            for m in self.models.values()
        ]
        return await _json(writer, 200, {"models": models})

    async def _show(self, body: dict, reader: Any, writer: asyncio.StreamWriter) -> bool:
        name = body.get("model") or body.get("name") or ""
        if (m := self._find(name)) is None:
            return await _error(writer, 404, f"model '{name}' not found")
        info = {
            "general.architecture": m.family,
            "general.parameter_count": 3_212_749_888,
            f"{m.family}.context_length": m.context_length,
            f"{m.family}.embedding_length": m.embed_dim,
        }
        return await _json(
            writer,
            200,
            {
                "license": "",
                "modelfile": f"FROM {m.full_name}\n",
                "parameters": "",
                "template": "{{ .Prompt }}",
                "details": _details(m),
                "model_info": info,
                "capabilities": list(m.capabilities),
                "modified_at": "2025-01-01T00:00:00Z",
            },
        )

    async def _chat(
        self, body: dict, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        request = self.requests[-1]  # this one's: dispatch appended it just now
        if not self.serial:
            return await self._answer(request, body, reader, writer)
        async with self._one_at_a_time:
            return await self._answer(request, body, reader, writer)

    async def _answer(
        self,
        request: Request,
        body: dict,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        name = str(body.get("model", ""))
        m = self._find(name)
        if m is None:
            return await _error(writer, 404, f'model "{name}" not found, try pulling it first')
        if "completion" not in m.capabilities:
            return await _error(writer, 400, f'"{name}" does not support chat')
        if body.get("tools") and "tools" not in m.capabilities:
            return await _error(
                writer, 400, f"registry.ollama.ai/library/{m.full_name} does not support tools"
            )
        if body.get("think") and "thinking" not in m.capabilities:
            return await _error(writer, 400, f'"{name}" does not support thinking')
        options = body.get("options") or {}
        num_ctx = int(options.get("num_ctx") or self.default_num_ctx)
        body, fit = fit_prompt(body, num_ctx)
        request.fit = fit
        responder = self.replies.popleft() if self.replies else self.default_reply
        reply = responder(body) if callable(responder) else responder
        room = max(256, num_ctx - fit["kept_tokens"])  # what is left of the context
        reply = cap_reply(reply, min(int(options.get("num_predict") or room), room))
        if reply.status is not None:
            return await _error(writer, reply.status, reply.error or "fake error")
        if isinstance(reply.raw, bytes):
            return await self._as_scripted(reply, reader, writer)
        if reply.raw is not None:
            return await _json(writer, 200, reply.raw)
        started = time.perf_counter_ns()
        thinking = reply.thinking if body.get("think") else ""
        words = sum(len(str(msg.get("content", "")).split()) for msg in body.get("messages", []))
        calls = [{"function": {"name": n, "arguments": a}} for n, a in reply.tool_calls]

        def final(message: dict[str, Any], count: int) -> dict[str, Any]:
            elapsed = time.perf_counter_ns() - started
            return {
                "model": name,
                "created_at": _now(),
                "message": message,
                "done": True,
                "done_reason": reply.done_reason,
                "total_duration": elapsed + 1_000_000,
                "load_duration": 1_000_000,
                "prompt_eval_count": max(1, words),
                "prompt_eval_duration": elapsed // 4,
                "eval_count": count,
                "eval_duration": elapsed - elapsed // 4,
            }

        if body.get("stream") is False:
            watch = _Ndjson(reader, writer)  # only to notice a hang-up while "generating"
            if reply.hang:
                await watch.gone
            alive = await watch.pause(reply.delay)
            watch.gone.cancel()
            if not alive:
                self.disconnects += 1
                return False
            if reply.error:
                return await _error(writer, 500, reply.error)
            message: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = calls
            return await _json(writer, 200, final(message, len(reply.pieces()) + len(calls)))

        stream = _Ndjson(reader, writer)
        lines: list[dict[str, Any]] = [
            {"role": "assistant", "content": "", "thinking": t} for t in _split(thinking)
        ]
        lines += [{"role": "assistant", "content": piece} for piece in reply.pieces()]
        if calls:
            lines.append({"role": "assistant", "content": "", "tool_calls": calls})
        for message in lines:
            line = {"model": name, "created_at": _now(), "message": message, "done": False}
            if not (await stream.pause(reply.delay) and await stream.send(line)):
                self.disconnects += 1
                return False
        if reply.error:
            await stream.send({"error": reply.error})
        elif reply.hang:
            await stream.gone
            self.disconnects += 1
            return False
        else:
            await stream.send(final({"role": "assistant", "content": ""}, len(lines)))
        await stream.end()
        return True

    async def _as_scripted(
        self, reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """``reply`` as it stands, on any path: an HTTP error, nothing (``hang``), or its
        ``raw`` bytes, then ``endless`` bytes without end (or ``repeat`` times), under its
        ``status`` when it has one."""
        plain = reply.raw is None and reply.endless is None
        if reply.status is not None and plain:
            return await _error(writer, reply.status, reply.error or "fake error")
        status = reply.status or 200
        start = reply.raw if isinstance(reply.raw, bytes) else json.dumps(reply.raw).encode()
        if not reply.hang and reply.endless is None:
            return await _send(writer, status, start, "application/json", reply.headers)
        watch = _Ndjson(reader, writer)  # to notice the client hanging up
        if reply.hang:
            await watch.gone
            self.disconnects += 1
            return False
        extra = "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
        writer.write(
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json"
            f"\r\n{extra}Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        more = itertools.repeat(reply.endless, *([] if reply.repeat is None else [reply.repeat]))
        for piece in itertools.chain([start], more):
            if watch.gone.done():
                self.disconnects += 1
                return False
            if piece:
                writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            try:
                await writer.drain()
            except ConnectionError:
                self.disconnects += 1
                return False
        await watch.end()
        return True

    async def _embed(self, body: dict, reader: Any, writer: asyncio.StreamWriter) -> bool:
        name = str(body.get("model", ""))
        if (m := self._find(name)) is None:
            return await _error(writer, 404, f'model "{name}" not found, try pulling it first')
        if "embedding" not in m.capabilities:
            return await _error(writer, 400, "this model does not support embeddings")
        given = body.get("input", [])
        texts = [given] if isinstance(given, str) else list(given)
        keep = body.get("dimensions")
        vectors = [fake_vector(m.full_name, t, m.embed_dim, keep) for t in texts]
        words = sum(len(t.split()) for t in texts)
        payload = {
            "model": name,
            "embeddings": vectors,
            "total_duration": 1_000_000,
            "load_duration": 100_000,
            "prompt_eval_count": words,
        }
        return await _json(writer, 200, payload)

    async def _pull(
        self, body: dict, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        name = str(body.get("model") or body.get("name") or "")
        model = self._find(name) or FakeModel(name, ("completion",))
        if name in self.pull_missing:
            lines = [
                {"status": "pulling manifest"},
                {"error": "pull model manifest: file does not exist"},
            ]
        else:
            layer = {"digest": f"sha256:{model.digest}", "total": model.size}
            lines = [{"status": "pulling manifest"}]
            lines += [
                {"status": f"pulling {model.digest[:12]}", **layer, "completed": done}
                for done in (0, model.size // 2, model.size)
            ]
            lines += [
                {"status": s} for s in ("verifying sha256 digest", "writing manifest", "success")
            ]
            self.models.setdefault(model.full_name, model)
        if body.get("stream") is False:
            if "error" in lines[-1]:
                return await _error(writer, 500, lines[-1]["error"])
            return await _json(writer, 200, {"status": "success"})
        stream = _Ndjson(reader, writer)
        for line in lines:
            if not await stream.send(line):
                self.disconnects += 1
                return False
        await stream.end()
        return True


def tokens_of(text: str) -> int:
    """The fake's tokenizer: four characters a token."""
    return math.ceil(len(text) / 4)


def _prompt_tokens(messages: list[dict[str, Any]]) -> int:
    return sum(tokens_of(str(m.get("content") or "")) + 4 for m in messages)


def fit_prompt(body: dict[str, Any], num_ctx: int) -> tuple[dict[str, Any], dict[str, int]]:
    """The request as the model sees it under ``num_ctx``, cut the way Ollama cuts: the oldest
    non-system messages (never the last), then the tokens after the first one."""
    messages = [dict(m) for m in body.get("messages") or []]
    fit = {"num_ctx": num_ctx, "prompt_tokens": _prompt_tokens(messages)}
    fit |= {"dropped_messages": 0, "cut_tokens": 0}
    while _prompt_tokens(messages) > num_ctx:
        index = next((i for i, m in enumerate(messages[:-1]) if m.get("role") != "system"), None)
        if index is None:
            break
        del messages[index]
        fit["dropped_messages"] += 1
    excess = _prompt_tokens(messages) - num_ctx
    if excess > 0:
        fit["cut_tokens"] = excess
        chars = excess * 4
        for m in messages:  # from the front: the system prompt goes first
            text = str(m.get("content") or "")
            keep = text[min(len(text), chars) :]
            chars -= len(text) - len(keep)
            m["content"] = keep
            if chars <= 0:
                break
    fit["kept_tokens"] = _prompt_tokens(messages)
    return {**body, "messages": messages}, fit


def cap_reply(reply: Reply, limit: int) -> Reply:
    """``reply`` stopped after ``limit`` tokens, with done_reason "length", when longer."""
    if reply.raw is not None or reply.status is not None:
        return reply
    pieces = reply.pieces()
    if tokens_of("".join(pieces)) <= limit:
        return reply
    kept: list[str] = []
    left = limit * 4
    for piece in pieces:
        kept.append(piece[:left])
        left -= len(piece)
        if left <= 0:
            break
    text = "".join(kept)
    return Reply(
        text, chunks=kept, thinking=reply.thinking, delay=reply.delay, done_reason="length"
    )


def endless(item: dict[str, Any], key: str = "facts") -> Callable[[dict[str, Any]], Reply]:
    """A responder that lists ``item`` under ``key`` as a small model does under a JSON
    grammar: as many as the schema's ``maxItems`` allows, then it closes the object; without
    ``maxItems`` it keeps going until the output limit cuts it off."""

    def reply(body: dict[str, Any]) -> Reply:
        schema = body.get("format") if isinstance(body.get("format"), dict) else {}
        limit = ((schema.get("properties") or {}).get(key) or {}).get("maxItems")
        one = json.dumps(item)
        if limit is None:
            return Reply('{"' + key + '": [' + ", ".join([one] * 5000))
        rest = {k: [] for k in ("facts", "rules") if k != key} | {"summary": ""}
        return Reply(json.dumps({key: [item] * limit, **rest}))

    return reply


def _details(m: FakeModel) -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "gguf",
        "family": m.family,
        "families": [m.family],
        "parameter_size": m.parameter_size,
        "quantization_level": m.quantization,
    }


def _split(text: str) -> list[str]:
    return Reply(text).pieces() if text else []


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    line = await reader.readline()
    if not line.strip():
        return None
    method, target, _ = line.decode("latin-1").split(" ", 2)
    headers = {}
    while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
        key, _, value = header.decode("latin-1").partition(":")
        headers[key.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    raw = await reader.readexactly(length) if length else b""
    try:
        body = json.loads(raw) if raw else None
    except json.JSONDecodeError:
        body = raw.decode("utf-8", "replace")
    return Request(method, target.split("?", 1)[0], body)


async def _send(
    writer: asyncio.StreamWriter,
    status: int,
    payload: bytes,
    ctype: str,
    headers: dict[str, str] | None = None,
) -> bool:
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {ctype}\r\n"
        f"{extra}Content-Length: {len(payload)}\r\n\r\n"
    )
    writer.write(head.encode() + payload)
    await writer.drain()
    return True


async def _json(writer: asyncio.StreamWriter, status: int, obj: Any) -> bool:
    return await _send(writer, status, json.dumps(obj).encode(), "application/json; charset=utf-8")


async def _error(writer: asyncio.StreamWriter, status: int, message: str) -> bool:
    return await _json(writer, status, {"error": message})


class ThreadedFakeOllama:
    """A :class:`FakeOllama` on its own event loop in a daemon thread, for synchronous tests."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.fake = FakeOllama(*args, **kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.fake.url

    @property
    def requests(self) -> list[Request]:
        return list(self.fake.requests)

    def start(self) -> ThreadedFakeOllama:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="fake-ollama", daemon=True)
        self._thread.start()
        self._run(self.fake.start())
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        self._run(self.fake.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
        self._loop = self._thread = None

    def script(self, *replies: Responder) -> None:
        async def add() -> None:
            self.fake.script(*replies)

        self._run(add())

    def go_down(self) -> None:
        self._run(self.fake.go_down())

    def come_up(self) -> None:
        self._run(self.fake.come_up())

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        assert self._loop is not None, "start() the server first"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def __enter__(self) -> ThreadedFakeOllama:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


_MY = re.compile(r"\bmy ([\w ]{2,30}?) is ([^.!?\n]{2,60})", re.IGNORECASE)
# "my doctor said I should sleep more": a health fact, which Navi holds for the user's review.
_CARE = re.compile(
    r"\bmy (doctor|gp|dentist|therapist|physio\w*|nurse) (?:said|says|told me)"
    r"(?: that)? ([^.!?\n]{2,80})",
    re.IGNORECASE,
)


def _said_fact(key: str, value: str, evidence: str, category: str) -> dict[str, Any]:
    """A fact as the extraction model states it, quoting the user."""
    return {
        "subject": "user",
        "key": key,
        "value": value.strip(),
        "category": category,
        "evidence": evidence,
        "source": "conversation",
        "confidence": 0.9,
    }


def _learn(body: dict[str, Any]) -> Reply:
    """A crude stand-in for the extraction model, so that trying the app by hand shows memory
    filling in: every "my X is Y" the user said becomes a fact, and "my doctor said ..." a
    health fact (held for review: the inbox has something to try); other structured requests
    (summary, profile) get their one field filled with a plain sentence."""
    schema = body["format"]
    said = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    if "facts" in schema.get("properties", {}):
        facts = [
            _said_fact(m.group(1).strip().lower(), m.group(2), m.group(0), "profile")
            for m in _MY.finditer(said)
        ]
        facts += [
            _said_fact(f"{m.group(1).lower()}'s advice", m.group(2), m.group(0), "health")
            for m in _CARE.finditer(said)
        ]
        summary = f"The user shared {len(facts)} fact(s)." if facts else "A short chat."
        return Reply(json.dumps({"facts": facts, "rules": [], "summary": summary}))
    field = (schema.get("required") or ["text"])[0]
    return Reply(json.dumps({field: "The user chatted with Navi."}))


def _echo(delay: float) -> Callable[[dict[str, Any]], Reply]:
    def reply(body: dict[str, Any]) -> Reply:
        said = next(
            (
                m.get("content", "")
                for m in reversed(body.get("messages", []))
                if m.get("role") == "user"
            ),
            "",
        )
        if isinstance(body.get("format"), dict):
            return _learn(body)
        return Reply(f"(fake Ollama) You said: {said}", delay=delay, thinking="Echoing the user.")

    return reply


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a fake Ollama with canned replies.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=11435)
    parser.add_argument("--delay", type=float, default=0.04, help="seconds between chunks")
    args = parser.parse_args(argv)

    async def serve() -> None:
        fake = FakeOllama(host=args.host, port=args.port, default_reply=_echo(args.delay))
        async with fake:
            print(f"fake Ollama on {fake.url}: models {', '.join(fake.models)}")
            print(f"try: OLLAMA_HOST={fake.url} navi   (Ctrl-C stops)", flush=True)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()


# ---- a model that remembers: repeats values, saves them with a tool, searches for them -------

_REMEMBER = re.compile(r"\bremember (?:that )?my ([\w ]{2,30}?) is ([^.!?\n]{2,60})", re.I)
_ASK = re.compile(r"\bwhat(?:'s| is) my ([\w ]{2,30}?)\s*\?", re.I)
_YOUR = re.compile(r"\byour ([\w ]{2,30}?) is ([^.!?\n\"]{2,60})", re.I)
_STATED = re.compile(r"\b(?:user )?([\w ]{2,30}?): ([^\n\"]{2,60})")


def remembering_model(health_keys: tuple[str, ...] = ()) -> Callable[[dict[str, Any]], Reply]:
    """A chat model that uses memory the way real ones do, for end-to-end tests of what Navi
    keeps: it repeats a value the user tells it ("Got it: your locker code is X."); asked to
    remember one, it calls ``memory_save``; asked for one, it calls ``memory_search`` and
    answers with what the tool returned. As the extraction model it learns every "my X is Y"
    the user said (keys in ``health_keys`` as health facts, which are held for review) and
    writes summaries that state the values; it writes profiles from the facts, and rewrites a
    redacted summary by dropping the removed parts."""

    def reply(body: dict[str, Any]) -> Reply:
        messages = body.get("messages", [])
        if isinstance(body.get("format"), dict):
            return _structured(body["format"], messages, health_keys)
        last = messages[-1] if messages else {}
        said = next(
            (str(m.get("content", "")) for m in reversed(messages) if m.get("role") == "user"), ""
        )
        if last.get("role") == "tool":
            return Reply(_after_tool(str(last.get("content", "")), said))
        tools = {t["function"]["name"] for t in body.get("tools") or []}
        if (m := _REMEMBER.search(said)) and "memory_save" in tools:
            key, value = m.group(1).strip(), m.group(2).strip()
            args = {"key": key, "value": value, "category": "profile"}
            return Reply(tool_calls=[("memory_save", args)])
        if (m := _ASK.search(said)) and "memory_search" in tools:
            return Reply(tool_calls=[("memory_search", {"query": m.group(1).strip()})])
        if found := _MY.search(said):
            return Reply(f"Got it: your {found.group(1).strip()} is {found.group(2).strip()}.")
        return Reply("OK.")

    return reply


def _after_tool(result: str, said: str) -> str:
    try:
        data = json.loads(result)
    except ValueError:
        return "The tool failed."
    if "results" in data:
        for hit in data["results"]:
            if m := _STATED.search(str(hit.get("text", ""))):
                return f"Your {m.group(1).strip()} is {m.group(2).strip()}."
        return "I don't know that yet."
    if data.get("saved") and (m := _REMEMBER.search(said)):
        return f"Saved: your {m.group(1).strip()} is {m.group(2).strip()}."
    return f"I could not save it: {data.get('message') or data.get('error') or data}"


def _structured(schema: dict[str, Any], messages: list[dict[str, Any]], health: tuple) -> Reply:
    system = str(messages[0].get("content", "")) if messages else ""
    material = str(messages[-1].get("content", "")) if messages else ""
    names = schema.get("properties", {})
    if "facts" in names:
        facts, sentences = [], []
        for line in material.splitlines():
            if line.startswith("User") and (m := _MY.search(line)):
                key, value = m.group(1).strip(), m.group(2).strip()
                facts.append(
                    {
                        "subject": "user",
                        "key": key,
                        "value": value,
                        "category": "health" if key in health else "profile",
                        "evidence": m.group(0).strip(),
                        "source": "conversation",
                        "confidence": 0.9,
                    }
                )
                sentences.append(f"The user said that their {key} is {value}.")
            elif line.startswith("Assistant") and (m := _YOUR.search(line)):
                sentences.append(
                    f"Navi told the user that their {m.group(1).strip()} is {m.group(2).strip()}."
                )
        summary = " ".join(dict.fromkeys(sentences)) or "A short chat."
        return Reply(json.dumps({"facts": facts, "rules": [], "summary": summary}))
    if "profile" in names:
        stated = [f"The user's {k.strip()} is {v.strip()}." for k, v in _STATED.findall(material)]
        return Reply(json.dumps({"profile": " ".join(stated) or "Nothing yet."}))
    field = (schema.get("required") or ["text"])[0]
    if "[forgotten]" in system:  # a redacted summary to rewrite: drop what was removed
        text = re.sub(r"[^.]*\[forgotten\][^.]*\.?", "", material).strip()
        return Reply(json.dumps({field: text or "A chat about the user's things."}))
    return Reply(json.dumps({field: material[:200]}))
