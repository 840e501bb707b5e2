"""Garbage from the model server at the session end: every kind ends as the session's named
reason (pending) or a processed session, never an exception out of the seam."""

from __future__ import annotations

import json
import math

import pytest

from navi_desktop.pipeline.session_end import end_session
from tests.fake_ollama import Reply
from tests.pipeline_helpers import MODEL, SETTINGS, extraction, new_session

LYON = '{"about": "user", "attribute": "home city", "value": "Lyon", "category": "profile",'
LYON += ' "quote": "I live in Lyon", "confidence": %s}'


def whole(content: str) -> Reply:
    """A reply sent as it is, past the fake's own output limit (a server that ignores it)."""
    message = {"role": "assistant", "content": content}
    return Reply(raw={"model": MODEL, "message": message, "done": True, "done_reason": "stop"})


GARBAGE = {
    "not JSON": (Reply("The user seems nice."), "not valid JSON"),
    "the wrong shape": (Reply("[1, 2, 3]"), "must be a JSON object"),
    "nested too deeply": (Reply("[" * 2000 + "]" * 2000), "nested too deeply"),
    "nested too deeply and cut": (Reply('{"facts": ' + "[" * 2000), "nested too deeply"),
    "a number of 5,000 digits": (
        whole('{"facts": [%s], "rules": []}' % (LYON % ("9" * 5000))),
        "a number too long",
    ),
    "NaN": (Reply('{"facts": [%s], "rules": []}' % (LYON % "NaN")), "confidence is not"),
    "a megabyte": (
        whole(json.dumps({"facts": [], "rules": [], "summary": "x" * 1_000_000})),
        "beyond its limit",
    ),
    "a reply nested too deeply around the answer": (
        Reply(
            raw=b'{"message": {"role": "assistant", "content": "{}"}, "done": true, "x": '
            + b"[" * 2000
            + b"]" * 2000
            + b"}"
        ),
        "malformed reply",
    ),
}


@pytest.mark.parametrize("name", GARBAGE)
async def test_garbage_ends_as_a_named_reason(store, llm, fake, name):
    reply, reason = GARBAGE[name]
    sid = await new_session(store, ("user", "I live in Lyon."))
    fake.script(reply)
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "pending"
    assert reason in report.reason and "\n" not in report.reason
    session = await store.get_session(sid)
    assert (session.state, session.pending_reason) == ("pending", report.reason)


PROFILES = {
    "nested too deeply": Reply('{"profile": ' + "[" * 2000 + "]" * 2000 + "}"),
    "a number of 5,000 digits": whole('{"profile": ' + "9" * 5000 + "}"),
    "a megabyte": whole(json.dumps({"profile": "x" * 1_000_000})),
}


@pytest.mark.parametrize("name", PROFILES)
async def test_a_garbage_profile_leaves_it_stale_and_the_session_processed(store, llm, fake, name):
    reply = PROFILES[name]
    sid = await new_session(store, ("user", "I live in Lyon."))
    fact = json.loads(LYON % "0.9")
    fake.script(extraction([fact], summary="The user lives in Lyon."), reply)
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "processed" and report.learned.get("added")
    assert not report.profile_updated
    _, stale = await store.profile_summary()
    assert stale  # written by a later try


async def test_a_lone_surrogate_escaped_in_the_models_json_is_kept_as_a_replacement(
    store, llm, fake
):
    """The model's JSON is text inside the server's JSON: its own "\\ud800" escape decodes to
    a lone surrogate only when Navi parses it, which no row can hold. It is U+FFFD there, as
    in the server's layer, and the session's facts and summary are saved."""
    sid = await new_session(store, ("user", "I live in Lyon."))
    fact = json.loads(LYON % "0.9") | {"attribute": "home \ud800city"}
    fake.script(extraction([fact], summary="The user lives in Lyon \udfff now."))
    report = await end_session(store, llm, sid, SETTINGS)
    assert report.status == "processed" and report.learned.get("added"), report
    rows = await store.db.fetchall("SELECT coalesce(key, '') || ': ' || value FROM memories")
    texts = [row[0] for row in rows]
    assert any("home \ufffdcity" in t for t in texts), texts
    assert any("Lyon \ufffd now" in t for t in texts), texts


VECTOR_GARBAGE = {
    "NaN": lambda dim: [math.nan] * dim,
    "infinity": lambda dim: [math.inf] + [0.5] * (dim - 1),
    "zeros": lambda dim: [0.0] * dim,
    "no numbers": lambda dim: [],
    "the wrong size": lambda dim: [0.5] * (dim + 3),
}


@pytest.mark.parametrize("kind", VECTOR_GARBAGE)
async def test_an_embedding_that_is_no_vector_is_never_stored(tmp_path, monkeypatch, kind):
    """A model server's vectors for one text are garbage: that memory keeps no vector (one
    would stand for it in every search) and is found by its words; the others in its batch
    get theirs; a query the model cannot embed searches by words."""
    import tests.fake_ollama as fo
    from navi_desktop.memory import MemoryStore
    from navi_desktop.memory.embedders import OllamaEmbedder
    from tests.pipeline_helpers import make_backend

    real = fo.fake_vector

    def vector(model: str, text: str, dim: int, keep: int | None = None) -> list[float]:
        return VECTOR_GARBAGE[kind](dim) if "poison" in text else real(model, text, dim, keep)

    monkeypatch.setattr(fo, "fake_vector", vector)
    async with fo.FakeOllama(fo.DEFAULT_MODELS) as fake, make_backend(fake) as llm:
        embedder = OllamaEmbedder("nomic-embed-text", llm.embed_fn)
        async with await MemoryStore.open(tmp_path / "memory.db", embedder=embedder) as store:
            for value in ("I drink green tea", "poison ivy grows by the shed", "I cycle to work"):
                await store.add_memory(value)
            await store.backfill_embeddings()
            rows = await store.db.fetchall(
                "SELECT m.value FROM embeddings e JOIN memories m ON m.id = e.memory_id"
            )
            assert sorted(r[0] for r in rows) == ["I cycle to work", "I drink green tea"]
            poisoned = (await store.search("poison ivy"))[0].memory
            assert poisoned is not None and poisoned.value == "poison ivy grows by the shed"
            hits = await store.search("green tea")
            assert hits[0].memory.value == "I drink green tea" and "vector" in hits[0].signals
            assert await store.missing_embeddings() == 1  # asked again later
            assert store.embedding_problem == (
                "ollama/nomic-embed-text gave no usable vector for a text (NaN, infinity, zeros,"
                " none or the wrong size)"
            )
            monkeypatch.setattr(fo, "fake_vector", real)  # the model mended: said no more
            await store.backfill_embeddings()
            assert store.embedding_problem is None and await store.missing_embeddings() == 0


async def test_a_model_whose_every_vector_is_garbage_is_not_asked_text_by_text(
    tmp_path, monkeypatch
):
    """When no text of a batch gets a vector the model is broken, not a text: the backfill
    stops there (said as an error, retried later) instead of asking for every row alone."""
    import tests.fake_ollama as fo
    from navi_desktop.memory import MemoryStore
    from navi_desktop.memory.embedders import BadVector, OllamaEmbedder
    from tests.pipeline_helpers import make_backend

    monkeypatch.setattr(fo, "fake_vector", lambda model, text, dim, keep=None: [math.nan] * dim)
    async with fo.FakeOllama(fo.DEFAULT_MODELS) as fake, make_backend(fake) as llm:
        embedder = OllamaEmbedder("nomic-embed-text", llm.embed_fn)
        async with await MemoryStore.open(tmp_path / "memory.db", embedder=embedder) as store:
            for i in range(10):
                await store.add_memory(f"memory number {i}")
            with pytest.raises(BadVector, match="returns no usable vectors"):
                await store.backfill_embeddings(batch=4)
            # one batch call, then its 4 texts alone: not all 10 rows one by one
            assert len(fake.bodies("/api/embed")) == 5
            assert await store.missing_embeddings() == 10


async def test_a_model_that_gives_garbage_vectors_is_named_in_the_daemons_status(
    tmp_path, monkeypatch
):
    """Silence would leave search on words alone for good: the daemon's status names the
    profile and the model, `navi daemon status` prints it and the app shows it in a banner."""
    import asyncio

    import tests.fake_ollama as fo
    from navi_desktop.config import load_settings
    from navi_desktop.daemon.service import Service
    from navi_desktop.paths import Paths
    from navi_desktop.tui.status import Status, daemon_fields
    from tests.daemon_support import Peer

    monkeypatch.setattr(fo, "fake_vector", lambda model, text, dim, keep=None: [math.nan] * dim)
    async with fo.FakeOllama(fo.DEFAULT_MODELS) as fake:
        paths = Paths.from_env({"NAVI_HOME": str(tmp_path)})
        paths.config.mkdir(parents=True)
        paths.config_file.write_text(
            f'[ollama]\nhost = "{fake.url}"\nchat_model = "llama3.2"\n'
            '[memory]\nembedder = "ollama"\nprofile = "me"\n'
        )
        settings, _ = load_settings(paths.config_file)

        sent: list[tuple[str, str, dict]] = []

        async def broadcast(topic: str, method: str, params: dict) -> None:
            sent.append((topic, method, params))

        service = Service(paths, settings, broadcast)
        try:
            handler = service._memory_handler("memory.add")
            await handler({"profile": "me", "args": ["I drink green tea"]}, Peer())
            for _ in range(100):
                status = await service.status({}, Peer())
                if status["embedding_problems"]:
                    break
                await asyncio.sleep(0.05)
            problem = status["embedding_problems"]["me"]
            assert problem.startswith("ollama/nomic-embed-text returns no usable vectors (NaN")
            banner = Status(**daemon_fields(status, None, "me")).problems()
            assert any(problem in line and "Settings (F4)" in line for line in banner)
            # Said as it is found, after the write's own notice: clients ask again then.
            notice = ("memory", "memory.embedding", {"profile": "me", "problem": problem})
            assert notice in sent
        finally:
            await service.shutdown(budget_s=5)
