"""A model server that never ends a line or a reply: refused at a limit sized to what Navi
asked for, in one line, with the memory it held bounded; and timeouts and the tool-round
limit name fixes that exist. The real ``ollama`` client against the fake server."""

from __future__ import annotations

import asyncio
import contextlib
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from navi_desktop.config import OllamaSettings, Settings
from navi_desktop.config_specs import SPECS
from navi_desktop.daemon.ollama_clients import OllamaClients
from navi_desktop.llm.backend import OllamaBackend
from navi_desktop.llm.errors import EMBEDDING, OllamaError, OllamaTimeout, ToolLoopLimit
from navi_desktop.llm.reply_limits import CHAT_LIMIT, MB, embed_limit, structured_limit
from navi_desktop.llm.tool_loop import chat_with_tools
from tests.fake_ollama import FakeModel, FakeOllama, Reply

USER = [{"role": "user", "content": "Hello"}]
SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string", "maxLength": 400}},
    "required": ["summary"],
}
# A reply line that starts as Ollama's do, then never ends.
START = b'{"model":"llama3.2","message":{"role":"assistant","content":"'
ENDLESS = Reply(raw=START, endless=b"A" * 65536)
HINT = "is it an Ollama server?"


@contextlib.contextmanager
def peak_memory() -> Iterator[list[int]]:
    """The most bytes Python held at once in the block, in ``[0]`` after it."""
    tracemalloc.start()
    peak: list[int] = []
    try:
        yield peak
    finally:
        peak.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


async def drain(events: AsyncIterator[Any]) -> None:
    async for _ in events:
        pass


async def chat_refused(fake: FakeOllama) -> tuple[str, int]:
    """A chat with 'llama3.2' at ``fake``, which must be refused (OllamaError): what it said,
    and the most bytes Python held while it ran."""
    async with OllamaBackend(fake.url, timeout=3) as backend:
        with peak_memory() as peak, pytest.raises(OllamaError) as err:
            await drain(backend.chat_stream("llama3.2", USER))
    return str(err.value), peak[0]


@pytest.fixture
async def fake() -> AsyncIterator[FakeOllama]:
    async with FakeOllama() as server:
        yield server


async def test_a_chat_line_without_end_is_refused_at_its_limit(fake: FakeOllama) -> None:
    fake.script(ENDLESS)
    said, peak = await chat_refused(fake)
    assert said == (
        f"the model server at {fake.url} sent a reply line over 4 MB during the chat with"
        f" 'llama3.2' (waiting for the first token) — {HINT}"
    )
    assert peak < 3 * CHAT_LIMIT.line
    await fake.wait_for_disconnect()


async def test_an_endless_structured_reply_is_refused_at_its_limit(fake: FakeOllama) -> None:
    """Learning's replies are not streamed: the whole body counts, sized to num_predict."""
    fake.script(ENDLESS)
    async with OllamaBackend(fake.url, timeout=3) as backend:
        with peak_memory() as peak, pytest.raises(OllamaError) as err:
            await backend.complete_json("llama3.2", USER, SCHEMA)
    limit = structured_limit(fake.bodies()[-1]["options"]["num_predict"]).body
    assert limit is not None
    assert str(err.value) == (
        f"the model server at {fake.url} sent a reply over {limit // MB} MB during the JSON"
        f" completion with 'llama3.2' — {HINT}"
    )
    assert peak[0] < 3 * limit
    await fake.wait_for_disconnect()


async def test_an_endless_embedding_reply_is_refused_and_a_wide_batch_is_not() -> None:
    wide = FakeModel("wide-embed", ("embedding",), "qwen3", "8B", embed_dim=4096)
    texts = [f"text number {i}" for i in range(64)]
    async with (
        FakeOllama([wide]) as fake,
        OllamaBackend(fake.url, timeout=3, role=EMBEDDING) as backend,
    ):
        assert (await backend.embed("wide-embed", texts)).dim == 4096  # the widest there are
        fake.path_replies["/api/embed"] = Reply(raw=b'{"embeddings":[[', endless=b"0.1," * 16384)
        with peak_memory() as peak, pytest.raises(OllamaError) as err:
            await backend.embed("wide-embed", texts)
    limit = embed_limit(64, 4096).body
    assert limit is not None
    assert str(err.value) == (
        f"the embedding host {fake.url} sent a reply over {limit // MB} MB during embedding"
        f" with 'wide-embed' — {HINT}"
    )
    assert peak[0] < 3 * limit


async def test_an_endless_error_page_is_refused_though_a_stream_was_asked(
    fake: FakeOllama,
) -> None:
    """An error's body is read whole, streamed request or not: a proxy's page without end."""
    page = Reply(status=502, raw=b"<html><body>", endless=b"<p>bad gateway</p>\n" * 4096)
    fake.path_replies["/api/chat"] = page
    said, peak = await chat_refused(fake)
    assert said == (
        f"the model server at {fake.url} sent a reply over 1 MB during the chat with"
        f" 'llama3.2' (waiting for the first token) — {HINT}"
    )
    assert peak < 5 * MB


def gzip_of_spaces(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: the gzip format
    block = b" " * MB
    return b"".join(packer.compress(block) for _ in range(size // MB)) + packer.flush()


async def test_a_compressed_reply_is_refused_not_inflated(fake: FakeOllama) -> None:
    """100 kB that would inflate to 100 MB: counted bytes mean nothing before inflating."""
    bomb = gzip_of_spaces(100 * MB)
    fake.path_replies["/api/embed"] = Reply(raw=bomb, headers={"Content-Encoding": "gzip"})
    async with OllamaBackend(fake.url, timeout=3) as backend:
        with peak_memory() as peak, pytest.raises(OllamaError) as err:
            await backend.embed("nomic-embed-text", ["hello"])
    assert str(err.value) == (
        f"the model server at {fake.url} sent a gzip-compressed reply during embedding with"
        f" 'nomic-embed-text' — {HINT}"
    )
    assert peak[0] < 10 * MB


async def test_a_stalled_chat_waits_the_timeout_setting_and_names_it(fake: FakeOllama) -> None:
    """The wait for the next chunk is the Timeout setting, so raising it is a fix."""
    settings = Settings(ollama=OllamaSettings(host=fake.url, timeout_s=0.5))
    clients = OllamaClients(lambda: settings, set, lambda work: None)
    fake.script(Reply(chunks=["Hel", "lo"], hang=True))
    try:
        async with asyncio.timeout(5):
            with pytest.raises(OllamaTimeout) as err:
                await drain(clients.chat().chat_stream("llama3.2", USER))
    finally:
        await clients.aclose()
    assert str(err.value) == (
        f"Ollama at {fake.url} timed out after 0.5 s during the chat with 'llama3.2' (waiting"
        " for the next chunk) — the model may still be loading or the machine is busy; try"
        " again, or raise ollama.timeout_s in settings"
    )
    assert "ollama.timeout_s" in SPECS


async def test_each_timeout_names_the_setting_that_holds_it_or_none(fake: FakeOllama) -> None:
    fake.path_replies["/api/version"] = Reply(hang=True)
    fake.script(Reply('{"summary": "late"}', hang=True))
    async with OllamaBackend(
        fake.url, timeout=5, probe_timeout=0.3, background_timeout=0.3
    ) as backend:
        with pytest.raises(OllamaTimeout) as probe:
            await backend.version()
        with pytest.raises(OllamaTimeout) as background:
            await backend.complete_json("llama3.2", USER, SCHEMA)
    # The version check's few seconds are no setting: it should answer at once.
    assert str(probe.value) == (
        f"Ollama at {fake.url} timed out after 0.3 s during the version check — the server is"
        " busy or stuck; try again, or restart it"
    )
    assert str(background.value).endswith("raise ollama.background_timeout_s in settings")
    assert "ollama.background_timeout_s" in SPECS


async def test_the_tool_round_limit_names_a_fix_that_exists(fake: FakeOllama) -> None:
    fake.default_reply = Reply(tool_calls=[("memory_search", {"query": "again"})])

    async def call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"results": []}

    tools = [{"type": "function", "function": {"name": "memory_search", "parameters": {}}}]
    async with OllamaBackend(fake.url, timeout=3) as backend:
        with pytest.raises(ToolLoopLimit) as err:
            await drain(chat_with_tools(backend.chat_stream, "llama3.2", USER, tools, call_tool))
    assert str(err.value) == (
        "model 'llama3.2' was still calling tools after 5 rounds — stopped; rephrase the request"
        " or ask for one thing at a time, or choose another chat model (ollama.chat_model) in"
        " settings"
    )
    assert "ollama.chat_model" in SPECS


async def test_many_short_lines_past_a_lines_limit_are_not_refused(fake: FakeOllama) -> None:
    """The limit is a line's: a pull's progress lines run to megabytes in all, each short.
    A counter that did not start again at each line would refuse every large pull."""
    line = b'{"status":"pulling manifest","completed":1,"total":2}\n'
    count = 2 * (1 << 20) // len(line)  # 2 MB of lines, against 1 MB a line
    fake.path_replies["/api/pull"] = Reply(raw=b"", endless=line, repeat=count)
    async with OllamaBackend(fake.url, timeout=10) as backend:
        seen = [p async for p in backend.pull("llama3.2")]
    assert len(seen) == count and seen[-1].status == "pulling manifest"
