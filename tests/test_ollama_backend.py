"""OllamaBackend: the real ``ollama`` client against a fake Ollama server on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time

import pytest

from navi_desktop.errors import NaviError
from navi_desktop.llm import (
    ContentDelta,
    Done,
    InvalidModelOutput,
    ModelMissing,
    OllamaError,
    OllamaTimeout,
    OllamaUnreachable,
    ThinkingDelta,
    ToolCall,
    ToolCallsRequested,
    ToolLoopLimit,
    ToolResult,
    ToolsUnsupported,
    resolve_host,
)
from navi_desktop.llm.backend import OllamaBackend
from navi_desktop.llm.schema import schema_error
from navi_desktop.llm.tool_loop import chat_with_tools
from navi_desktop.memory.embedders import OllamaEmbedder
from tests.fake_ollama import FakeModel, FakeOllama, Reply, ThreadedFakeOllama, fake_vector
from tests.pipeline_helpers import make_backend

MODELS = [
    FakeModel("llama3.2"),
    FakeModel("qwen3:8b", ("completion", "tools", "thinking"), "qwen3", "8.2B"),
    FakeModel("gemma2", ("completion",), "gemma2", "2.6B"),
    FakeModel("mini-embed", ("embedding",), "bert", "22M", "F16", 45_000_000, embed_dim=8),
]
USER = [{"role": "user", "content": "What is my cat called?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_memory",
            "description": "Search what you know about the user.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]
FACTS_SCHEMA = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "key": {"type": "string"},
                    "value": {"type": "string"},
                    "confidence": {"type": "number"},
                },
                "required": ["key", "value"],
            },
        }
    },
    "required": ["facts"],
}


@pytest.fixture
async def fake():
    async with FakeOllama(MODELS) as server:
        yield server


@pytest.fixture
async def backend(fake):
    async with make_backend(fake, timeout=2) as client:
        yield client


async def collect(stream):
    return [event async for event in stream]


async def no_other_tasks():
    me = asyncio.current_task()
    async with asyncio.timeout(1):
        while [t for t in asyncio.all_tasks() if t is not me]:
            await asyncio.sleep(0.01)


@contextlib.contextmanager
def left_to_gc():
    """Names our async generators that were dropped without being closed, which the garbage
    collector would otherwise close late (or never), keeping their HTTP stream open.

    (httpx's ``Response.aiter_lines`` generator, which the ``ollama`` client never closes, is
    left to the collector; harmless, since the client closes the response itself.)"""
    old = sys.get_asyncgen_hooks()
    leaked: list[str] = []

    def finalizer(agen):
        if "navi_desktop" in agen.ag_code.co_filename:
            leaked.append(agen.__qualname__)
        old.finalizer(agen)

    sys.set_asyncgen_hooks(old.firstiter, finalizer)
    try:
        yield leaked
    finally:
        sys.set_asyncgen_hooks(*old)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_one_line(err: BaseException) -> str:
    assert isinstance(err, NaviError)
    text = str(err)
    assert text and "\n" not in text
    return text


# ---- server and models ------------------------------------------------------------------


async def test_health_version_and_models(fake, backend):
    assert await backend.version() == "0.12.3"
    health = await backend.health()
    assert health.reachable and health.version == "0.12.3" and health.host == fake.url
    assert health.error is None
    models = {m.name: m for m in await backend.models()}
    assert list(models) == ["llama3.2:latest", "qwen3:8b", "gemma2:latest", "mini-embed:latest"]
    llama = models["llama3.2:latest"]
    assert (llama.family, llama.parameter_size, llama.size) == ("llama", "3.2B", 2_019_393_189)
    assert llama.digest == MODELS[0].digest


async def test_capabilities_are_read_once_per_model(fake, backend):
    assert await backend.capabilities("qwen3:8b") == {"completion", "tools", "thinking"}
    assert await backend.capabilities("qwen3:8b") == {"completion", "tools", "thinking"}
    assert await backend.capabilities("mini-embed") == {"embedding"}
    assert [r.body["model"] for r in fake.requests if r.path == "/api/show"] == [
        "qwen3:8b",
        "mini-embed",
    ]
    assert await backend.supports_tools("llama3.2")
    assert not await backend.supports_tools("gemma2")


# ---- streamed chat ----------------------------------------------------------------------


async def test_chat_stream_yields_deltas_in_order_then_done(fake, backend):
    fake.script(Reply(chunks=["Your ", "cat ", "is ", "Miso."]))
    events = await collect(backend.chat_stream("llama3.2", USER, options={"temperature": 0.2}))
    assert events[:-1] == [ContentDelta(t) for t in ["Your ", "cat ", "is ", "Miso."]]
    done = events[-1]
    assert isinstance(done, Done) and done.final
    assert done.content == "Your cat is Miso." and done.done_reason == "stop"
    assert done.eval_count == 4 and done.prompt_eval_count == 5
    assert done.total_duration and done.total_duration > 0
    body = fake.bodies()[-1]
    assert body["stream"] is True and body["messages"] == USER
    assert body["options"] == {"temperature": 0.2} and not body.get("tools")


async def test_thinking_comes_as_its_own_deltas(fake, backend):
    fake.script(Reply("It is Miso.", thinking="The user said so earlier."))
    events = await collect(backend.chat_stream("qwen3:8b", USER, think=True))
    thinking = [e.text for e in events if isinstance(e, ThinkingDelta)]
    assert "".join(thinking) == "The user said so earlier."
    assert isinstance(events[0], ThinkingDelta) and events[-1].thinking == "".join(thinking)
    assert fake.bodies()[-1]["think"] is True


async def test_closing_the_stream_closes_the_connection(fake, backend):
    fake.script(Reply(chunks=["one ", "two "], hang=True))
    with left_to_gc() as leaked:
        stream = backend.chat_stream("llama3.2", USER)
        assert await anext(stream) == ContentDelta("one ")
        await stream.aclose()
        await fake.wait_for_disconnect(timeout=0.5)
        await no_other_tasks()
    assert leaked == []


async def test_cancelling_the_consumer_closes_the_connection(fake, backend):
    fake.script(Reply(chunks=["one ", "two "], hang=True))
    seen: list = []

    async def consume():
        async for event in backend.chat_stream("llama3.2", USER):
            seen.append(event)

    with left_to_gc() as leaked:
        task = asyncio.create_task(consume())
        while len(seen) < 2:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await fake.wait_for_disconnect(timeout=0.5)
        await no_other_tasks()
    assert leaked == []
    # The backend is still usable afterwards.
    fake.script(Reply("again"))
    assert (await collect(backend.chat_stream("llama3.2", USER)))[-1].content == "again"


# ---- tools ------------------------------------------------------------------------------


async def test_tool_loop_runs_the_tool_and_sends_the_result_back(fake, backend):
    fake.script(
        Reply(tool_calls=[("search_memory", {"query": "cat name"})]),
        Reply("Your cat is Miso."),
    )
    calls = []

    async def call_tool(name, arguments):
        calls.append((name, arguments))
        return "the user's cat is called Miso"

    events = await collect(chat_with_tools(backend.chat_stream, "llama3.2", USER, TOOLS, call_tool))
    assert calls == [("search_memory", {"query": "cat name"})]
    call = ToolCall("search_memory", {"query": "cat name"})
    assert events[0] == ToolCallsRequested((call,))
    assert isinstance(events[1], Done) and not events[1].final and events[1].tool_calls == (call,)
    assert events[2] == ToolResult(call, "the user's cat is called Miso")
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "Your cat is Miso."
    assert isinstance(events[-1], Done) and events[-1].final

    first, second = fake.bodies()
    assert first["tools"][0]["function"]["name"] == "search_memory"
    assert second["messages"][0] == USER[0]
    assistant, tool = second["messages"][1:]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"] == [
        {"function": {"name": "search_memory", "arguments": {"query": "cat name"}}}
    ]
    assert tool == {
        "role": "tool",
        "tool_name": "search_memory",
        "content": "the user's cat is called Miso",
    }


async def test_closing_the_tool_loop_mid_reply_closes_the_connection(fake, backend):
    fake.script(Reply(tool_calls=[("search_memory", {"query": "x"})]), Reply("a b", hang=True))

    async def call_tool(name, arguments):
        return "nothing"

    with left_to_gc() as leaked:
        loop = chat_with_tools(backend.chat_stream, "llama3.2", USER, TOOLS, call_tool)
        async for event in loop:
            if isinstance(event, ContentDelta):
                break
        await loop.aclose()
        await fake.wait_for_disconnect(timeout=0.5)
        await no_other_tasks()
    assert leaked == []


async def test_a_failing_tool_is_reported_to_the_model(fake, backend):
    fake.script(Reply(tool_calls=[("search_memory", {"query": "x"})]), Reply("Sorry."))

    async def call_tool(name, arguments):
        raise RuntimeError("database is locked")

    events = await collect(chat_with_tools(backend.chat_stream, "llama3.2", USER, TOOLS, call_tool))
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.is_error and result.content == "error: database is locked"
    assert fake.bodies()[1]["messages"][-1]["content"] == "error: database is locked"


async def test_tool_loop_stops_after_max_rounds(fake, backend):
    fake.default_reply = Reply(tool_calls=[("search_memory", {"query": "again"})])
    ran = []

    async def call_tool(name, arguments):
        ran.append(name)
        return {"hits": []}

    events = []
    with pytest.raises(ToolLoopLimit) as err:
        async for event in chat_with_tools(
            backend.chat_stream, "llama3.2", USER, TOOLS, call_tool, max_rounds=3
        ):
            events.append(event)
    assert len(fake.bodies()) == 3 and len(ran) == 2
    assert sum(isinstance(e, Done) for e in events) == 3
    assert fake.bodies()[-1]["messages"][-1]["content"] == '{"hits": []}'
    text = assert_one_line(err.value)
    assert "llama3.2" in text and "3 rounds" in text


async def test_model_without_tools(fake, backend):
    assert not await backend.supports_tools("gemma2")
    with pytest.raises(ToolsUnsupported) as err:
        await collect(backend.chat_stream("gemma2", USER, tools=TOOLS))

    async def never(name, arguments):
        raise AssertionError("no tool should run")

    with pytest.raises(ToolsUnsupported):
        await collect(chat_with_tools(backend.chat_stream, "gemma2", USER, TOOLS, never))
    assert "gemma2" in assert_one_line(err.value)
    # Without tools the same model chats fine.
    assert (await collect(backend.chat_stream("gemma2", USER)))[-1].final


# ---- structured output ------------------------------------------------------------------


async def test_complete_json_passes_the_schema_as_format(fake, backend):
    fake.script(Reply('{"facts": [{"key": "cat", "value": "Miso", "confidence": 0.9}]}'))
    result = await backend.complete_json("llama3.2", USER, FACTS_SCHEMA, {"temperature": 0})
    assert result == {"facts": [{"key": "cat", "value": "Miso", "confidence": 0.9}]}
    body = fake.bodies()[-1]
    assert body["format"] == FACTS_SCHEMA and body["stream"] is False
    # The caller's options win; every structured request is bounded and seeded.
    assert body["options"]["temperature"] == 0
    assert {"seed", "num_predict", "num_ctx"} <= set(body["options"])


async def test_a_lone_surrogate_in_any_model_text_comes_in_as_a_replacement_character(
    fake, backend
):
    """Valid JSON ("\\ud800"), not valid text: every way a model's text comes in makes it
    U+FFFD, so nothing downstream (a frame, a row, a file) fails on it."""
    fake.script(
        Reply(chunks=["a\ud800", "b"], thinking="t\udfff"),
        Reply(tool_calls=[("search_memory", {"query": "x\ud83d", "n": [1, "\udc00"]})]),
        Reply('{"facts": [{"key": "cat", "value": "Mi\ud800so", "confidence": 0.9}]}'),
    )
    events = await collect(backend.chat_stream("qwen3:8b", USER, think=True))
    assert events[-1].content == "a\ufffdb" and events[-1].thinking == "t\ufffd"
    events = await collect(backend.chat_stream("llama3.2", USER, tools=TOOLS))
    assert events[-1].tool_calls == (
        ToolCall("search_memory", {"query": "x\ufffd", "n": [1, "\ufffd"]}),
    )
    result = await backend.complete_json("llama3.2", USER, FACTS_SCHEMA)
    assert result["facts"][0]["value"] == "Mi\ufffdso"


@pytest.mark.parametrize(
    "content",
    [
        '{"facts": [{"key": "c\\udfffat", "value": "Mi\\ud800so", "confidence": 0.9}]}',
        'Here: {"facts": [{"key": "c\\uDFFFat", "value": "Mi\\uD800so", "confidence": 0.9}]}',
    ],
    ids=["whole", "in prose"],
)
async def test_a_lone_surrogate_escaped_in_the_models_own_json_comes_in_replaced(
    fake, backend, content
):
    """The model's JSON is a second layer of escapes: "\\ud800" in its text is a lone
    surrogate only once Navi parses it, however it found the JSON."""
    fake.script(Reply(content))
    result = await backend.complete_json("llama3.2", USER, FACTS_SCHEMA)
    assert result["facts"][0] == {"key": "c\ufffdat", "value": "Mi\ufffdso", "confidence": 0.9}


def test_replacing_lone_surrogates_reaches_keys_and_any_depth():
    from navi_desktop.llm.jsontext import find_json

    deep = "[" * 900 + '{"k\\ud800": "v\\udc00"}' + "]" * 900
    value = find_json(deep).value
    for _ in range(900):
        value = value[0]
    assert value == {"k\ufffd": "v\ufffd"}
    cut = find_json('{"facts": [{"v": "Mi\\ud800so"}, {"ke', salvage=True)
    assert cut is not None and cut.cut and cut.value == {"facts": [{"v": "Mi\ufffdso"}]}
    # An escaped backslash before "ud800" is text, not an escape: left as it is.
    assert find_json('{"a": "\\\\ud800"}').value == {"a": "\\ud800"}


@pytest.mark.parametrize(
    ("output", "done_reason", "expected"),
    [
        ("Sure! Here are the facts you asked for", "stop", "not valid JSON"),
        ('{"facts": [{"key": "cat", "val', "length", "cut off"),
        ('{"facts": [{"key": "cat", "value": 3}]}', "stop", "$.facts[0].value should be string"),
        ('{"fact": []}', "stop", "lacks required key 'facts'"),
    ],
)
async def test_complete_json_rejects_bad_output(fake, backend, output, done_reason, expected):
    fake.script(Reply(output, done_reason=done_reason))
    with pytest.raises(InvalidModelOutput) as err:
        await backend.complete_json("llama3.2", USER, FACTS_SCHEMA)
    text = assert_one_line(err.value)
    assert expected in text and output[:10] in text
    assert err.value.output == output


def test_schema_check_follows_local_refs():
    schema = {
        "$defs": {"Fact": {"type": "object", "properties": {"n": {"type": "integer"}}}},
        "type": "object",
        "properties": {"facts": {"type": "array", "items": {"$ref": "#/$defs/Fact"}}},
    }
    assert schema_error({"facts": [{"n": 1}]}, schema) is None
    assert (
        schema_error({"facts": [{"n": True}]}, schema) == "$.facts[0].n should be integer, got bool"
    )
    assert "not one of" in schema_error("x", {"enum": ["a", "b"]})


# ---- embeddings -------------------------------------------------------------------------


async def test_embed_batches_and_records_the_dimension(fake, backend):
    texts = [f"note number {i}" for i in range(7)]
    result = await backend.embed("mini-embed", texts, batch_size=3)
    assert (result.model, result.dim, len(result.vectors)) == ("mini-embed", 8, 7)
    assert [len(b["input"]) for b in fake.bodies("/api/embed")] == [3, 3, 1]
    assert result.vectors[4] == pytest.approx(fake_vector("mini-embed:latest", texts[4], 8))
    assert backend.embedding_dims == {"mini-embed": 8}

    many = await backend.embed("mini-embed", [f"t{i}" for i in range(130)])
    assert len(many.vectors) == 130 and len(fake.bodies("/api/embed")) == 3 + 3
    empty = await backend.embed("mini-embed", [])
    assert (empty.vectors, empty.dim) == ([], 8) and len(fake.bodies("/api/embed")) == 6


async def test_embed_fn_serves_the_memory_engine(fake, backend):
    embedder = OllamaEmbedder("mini-embed", backend.embed_fn)
    vectors = await embedder.embed(["my cat Miso", "my dog Rex"], query=False)
    assert vectors.shape == (2, 8)


async def test_embedding_with_a_chat_model_is_a_clear_error(fake, backend):
    with pytest.raises(OllamaError) as err:
        await backend.embed("llama3.2", ["x"])
    assert "does not support embeddings" in assert_one_line(err.value)


# ---- pull -------------------------------------------------------------------------------


async def test_pull_reports_progress_and_installs(fake, backend):
    progress = await collect(backend.pull("phi4"))
    assert progress[0].status == "pulling manifest" and progress[-1].status == "success"
    fractions = [p.fraction for p in progress if p.fraction is not None]
    assert fractions == [0.0, pytest.approx(0.5, abs=0.01), 1.0]
    assert "phi4:latest" in [m.name for m in await backend.models()]


async def test_pull_of_an_unknown_model_fails_clearly(fake, backend):
    fake.pull_missing.add("nosuchmodel")
    with pytest.raises(OllamaError) as err:
        await collect(backend.pull("nosuchmodel"))
    assert "file does not exist" in assert_one_line(err.value)


# ---- failures ---------------------------------------------------------------------------


async def test_dead_server_is_unreachable_with_a_fix():
    port = free_port()
    async with OllamaBackend(f"127.0.0.1:{port}", timeout=1, connect_timeout=1) as dead:
        attempts = [
            dead.version,
            dead.models,
            lambda: dead.capabilities("llama3.2"),
            lambda: dead.embed("mini-embed", ["x"]),
            lambda: dead.complete_json("llama3.2", USER, FACTS_SCHEMA),
            lambda: collect(dead.chat_stream("llama3.2", USER)),
            lambda: collect(dead.pull("llama3.2")),
        ]
        for attempt in attempts:
            with pytest.raises(OllamaUnreachable) as err:
                await attempt()
            text = assert_one_line(err.value)
            assert text == (
                f"cannot reach Ollama at http://127.0.0.1:{port}: connection refused — start it"
                " with `ollama serve`, or set the host in settings / OLLAMA_HOST"
            )
        health = await dead.health()
        assert not health.reachable and "ollama serve" in health.error


async def test_server_going_down_and_up(fake, backend):
    assert (await backend.health()).reachable
    await fake.go_down()
    with pytest.raises(OllamaUnreachable):
        await backend.models()
    await fake.come_up()
    assert len(await backend.models()) == 4


async def test_missing_model_says_how_to_pull_it(fake, backend):
    attempts = [
        lambda: collect(backend.chat_stream("llama9", USER)),
        lambda: backend.complete_json("llama9", USER, FACTS_SCHEMA),
        lambda: backend.capabilities("llama9"),
        lambda: backend.embed("llama9", ["x"]),
    ]
    for attempt in attempts:
        with pytest.raises(ModelMissing) as err:
            await attempt()
        assert assert_one_line(err.value) == (
            "model 'llama9' is not installed — run `ollama pull llama9`"
        )


async def test_first_token_timeout(fake):
    fake.script(Reply(chunks=["late"], delay=2))
    async with OllamaBackend(fake.url, first_token_timeout=0.2, chunk_timeout=1) as slow:
        started = time.monotonic()
        with pytest.raises(OllamaTimeout) as err:
            await collect(slow.chat_stream("llama3.2", USER))
        assert time.monotonic() - started < 1
        text = assert_one_line(err.value)
        assert fake.url in text and "0.2 s" in text and "first token" in text
        assert "llama3.2" in text and err.value.seconds == 0.2
        await fake.wait_for_disconnect(timeout=0.5)


async def test_stalled_stream_times_out_after_the_chunk_limit(fake):
    fake.script(Reply(chunks=["fast "], hang=True))
    async with OllamaBackend(fake.url, first_token_timeout=1, chunk_timeout=0.15) as slow:
        seen = []
        with pytest.raises(OllamaTimeout) as err:
            async for event in slow.chat_stream("llama3.2", USER):
                seen.append(event)
        assert seen == [ContentDelta("fast ")]
        assert "0.15 s" in str(err.value) and "next chunk" in str(err.value)
        await fake.wait_for_disconnect(timeout=0.5)


async def test_non_streamed_call_times_out(fake):
    fake.script(Reply("{}", hang=True))
    async with OllamaBackend(fake.url, timeout=0.2) as slow:
        with pytest.raises(OllamaTimeout) as err:
            await slow.complete_json("llama3.2", USER, FACTS_SCHEMA)
        assert "JSON completion" in str(err.value) and "0.2 s" in str(err.value)
        await fake.wait_for_disconnect(timeout=0.5)


async def test_error_line_mid_stream(fake, backend):
    fake.script(Reply(chunks=["Hel", "lo"], error="llama runner process has terminated"))
    seen = []
    with pytest.raises(OllamaError) as err:
        async for event in backend.chat_stream("llama3.2", USER):
            seen.append(event)
    assert seen == [ContentDelta("Hel"), ContentDelta("lo")]
    assert "llama runner process has terminated" in assert_one_line(err.value)


async def test_server_errors_carry_the_servers_message(fake, backend):
    fake.fail_status, fake.fail_message = 500, "out of memory"
    with pytest.raises(OllamaError) as err:
        await backend.models()
    assert "out of memory" in assert_one_line(err.value) and err.value.status_code == 500
    assert not (await backend.health()).reachable
    fake.fail_status = None
    with pytest.raises(OllamaError) as err:
        await collect(backend.chat_stream("gemma2", USER, think=True))
    assert "does not support thinking" in str(err.value)


async def test_malformed_replies_and_malformed_requests(fake, backend):
    fake.script(Reply(raw={"model": "llama3.2", "done": True}))  # no "message" object
    with pytest.raises(OllamaError) as err:
        await backend.complete_json("llama3.2", USER, FACTS_SCHEMA)
    assert "malformed reply" in assert_one_line(err.value)
    # A field of the wrong type is named in words, with the fix; never pydantic's own dump.
    fake.script(Reply(raw={"model": "llama3.2", "message": {"role": "assistant", "content": 123}}))
    with pytest.raises(OllamaError) as err:
        await backend.complete_json("llama3.2", USER, FACTS_SCHEMA)
    said = assert_one_line(err.value)
    assert "(message.content: Input should be a valid string)" in said
    assert said.endswith("is it an Ollama server, and up to date?")
    assert "validation error" not in said and "type=" not in said
    # The caller's own malformed message is a bug, not a server problem.
    with pytest.raises(ValueError) as bug:
        await backend.complete_json("llama3.2", [{"role": 5}], FACTS_SCHEMA)
    assert not isinstance(bug.value, NaviError)


# ---- host ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "url"),
    [
        (None, "http://127.0.0.1:11434"),
        ("", "http://127.0.0.1:11434"),
        ("127.0.0.1:11434", "http://127.0.0.1:11434"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("0.0.0.0:8080", "http://127.0.0.1:8080"),
        ("http://gpu-box:11434", "http://gpu-box:11434"),
        ("https://ollama.example.com/", "https://ollama.example.com:443"),
        ("[::1]:11434", "http://[::1]:11434"),
        ("gpu-box", "http://gpu-box:11434"),
    ],
)
def test_host_resolution(given, url):
    assert resolve_host(given, environ={}) == url


async def test_ollama_host_is_honoured(fake, monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", f"0.0.0.0:{fake.port}")
    async with OllamaBackend() as from_env:
        assert from_env.host == f"http://127.0.0.1:{fake.port}"
        assert (await from_env.health()).reachable
    assert OllamaBackend("http://elsewhere:1").host == "http://elsewhere:1"


def test_threaded_fake_serves_synchronous_callers():
    with ThreadedFakeOllama(MODELS) as server:
        server.script(Reply("from another thread"))

        async def talk():
            async with OllamaBackend(server.url, timeout=2) as client:
                return await collect(client.chat_stream("llama3.2", USER))

        assert asyncio.run(talk())[-1].content == "from another thread"
        assert [r.path for r in server.requests] == ["/api/chat"]


async def test_a_web_server_at_the_host_is_named_not_quoted():
    """Another program on Ollama's port (a web server) answers a chat with an HTML page: the
    error said "Ollama refused the chat: <!DOCTYPE HTML> <html lang=…"."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = b"<!DOCTYPE HTML>\n<html><body><h1>Error response</h1></body></html>\n"
            self.send_response(501)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        async with OllamaBackend(host, timeout=5) as backend:
            with pytest.raises(OllamaError) as err:
                await collect(backend.chat_stream("llama3.2", USER))
    finally:
        server.shutdown()
    text = assert_one_line(err.value)
    assert text.startswith(f"{host} sent a web page (HTTP 501) in answer to the chat with")
    assert text.endswith(" — is it an Ollama server?") and "<" not in text


@contextlib.asynccontextmanager
async def _listener():
    """A port that counts the connections made to it (and answers none)."""
    seen: list[int] = []

    async def note(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(1)
        writer.close()

    server = await asyncio.start_server(note, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", seen
    finally:
        server.close()
        await server.wait_closed()


async def test_requests_go_to_the_host_not_through_a_proxy_from_the_environment(fake, monkeypatch):
    """HTTP_PROXY (or ALL_PROXY) sent every request, memories and all, through that proxy,
    127.0.0.1 included."""
    async with _listener() as (proxy, seen):
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
            monkeypatch.setenv(name, proxy)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        backend = make_backend(fake)
        try:
            assert await backend.version() == "0.12.3"
            assert len(await backend.embed_fn("mini-embed", ["my PIN is 4711"])) == 1
        finally:
            await backend.aclose()
    assert seen == []
    assert [r.path for r in fake.requests][-1] == "/api/embed"


async def test_a_redirect_from_the_host_is_not_followed(fake):
    """A host answering with a redirect would have the request, memories and all, sent on."""
    async with _listener() as (elsewhere, seen):
        fake.path_replies["/api/embed"] = Reply(
            raw=b"", status=307, headers={"Location": f"{elsewhere}/api/embed"}
        )
        backend = make_backend(fake)
        try:
            with pytest.raises(NaviError):
                await backend.embed_fn("mini-embed", ["my PIN is 4711"])
        finally:
            await backend.aclose()
    assert seen == []
