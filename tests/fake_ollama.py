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
``fail_status`` makes every API call fail; ``go_down()`` / ``come_up()`` refuse connections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
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
    raw: dict[str, Any] | None = None  # sent verbatim as the whole reply (malformed replies)

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
        self.disconnects = 0  # streams the client closed before they ended
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
            f"{m.family}.context_length": 131072,
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
        responder = self.replies.popleft() if self.replies else self.default_reply
        reply = responder(body) if callable(responder) else responder
        if reply.status is not None:
            return await _error(writer, reply.status, reply.error or "fake error")
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


async def _send(writer: asyncio.StreamWriter, status: int, payload: bytes, ctype: str) -> bool:
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
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


def _learn(body: dict[str, Any]) -> Reply:
    """A crude stand-in for the extraction model, so that trying the app by hand shows memory
    filling in: every "my X is Y" the user said becomes a fact; other structured requests
    (summary, profile) get their one field filled with a plain sentence."""
    schema = body["format"]
    said = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    if "facts" in schema.get("properties", {}):
        facts = [
            {
                "subject": "user",
                "key": key.strip().lower(),
                "value": value.strip(),
                "category": "profile",
                "evidence": match.group(0),
                "source": "conversation",
                "confidence": 0.9,
            }
            for match in _MY.finditer(said)
            for key, value in [match.groups()]
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
