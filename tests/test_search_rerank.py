"""Transcript re-ranking: a question naming a person prefers what that person said, and a
"when" question prefers a turn that says when. Real SQLite files, text-only search."""

from __future__ import annotations

from dataclasses import replace

import pytest

from navi_desktop.memory import MemoryStore
from navi_desktop.memory.rerank import asks_when, named_authors, says_when
from navi_desktop.memory.search import Tuning


@pytest.fixture
async def store(tmp_path):
    async with await MemoryStore.open(tmp_path / "memory.db") as s:
        yield s


async def say(store: MemoryStore, session: str, name: str, text: str, at: str) -> int:
    return (await store.save_message(session, "user", text, name=name, at=at)).id


async def test_a_question_naming_a_person_prefers_what_that_person_said(store):
    chat = await store.create_session("chat", at="2023-05-08T13:00:00+00:00")
    # The other speaker's turn matches the question through more signals (its capitalised
    # "Pottery" is also an entity)...
    other = await say(
        store,
        chat.id,
        "Caroline",
        "Pottery class! A pottery class is the best.",
        "2023-05-08T13:00:01Z",
    )
    # ...but the named person's own turn is the answer.
    own = await say(store, chat.id, "Melanie", "I took a pottery class.", "2023-05-08T13:00:02Z")
    query = "What does Melanie do? pottery class"
    hits = await store.search(query, kinds=["message"])
    assert [h.id for h in hits[:2]] == [own, other]
    assert "author" in hits[0].signals and "author" not in hits[1].signals
    assert [h.id for h in await store.search(query, kinds=["message"], limit=1)] == [own]

    store.tuning = replace(Tuning(), author_boost=1.0)  # without the boost, the order flips
    hits = await store.search(query, kinds=["message"])
    assert [h.id for h in hits[:2]] == [other, own]


async def test_a_when_question_prefers_a_turn_that_says_when(store):
    chat = await store.create_session("chat", at="2023-05-08T13:00:00+00:00")
    undated = await say(
        store, chat.id, "Melanie", "so fun, we love camping and camping.", "2023-05-08T13:00:01Z"
    )
    dated = await say(
        store, chat.id, "Melanie", "We went camping last week.", "2023-05-08T13:00:02Z"
    )
    hits = await store.search("When did they go camping?", kinds=["message"])
    assert [h.id for h in hits[:2]] == [dated, undated]
    assert "time" in hits[0].signals

    store.tuning = replace(Tuning(), time_boost=1.0)  # without the boost, the order flips
    hits = await store.search("When did they go camping?", kinds=["message"])
    assert [h.id for h in hits[:2]] == [undated, dated]
    store.tuning = Tuning()

    # Not a "when" question: the turn matching the words best stays first.
    hits = await store.search("Did they go camping?", kinds=["message"])
    assert [h.id for h in hits[:2]] == [undated, dated]


async def test_memories_are_not_reranked(store):
    """The re-ranking is for transcript searches: a fact search keeps its fused order."""
    await store.add_memory("Melanie: pottery, pottery and more pottery", key="hobby melanie")
    await store.add_memory("took a pottery class last week", key="class")
    hits = await store.search("When did Melanie start pottery?", kinds=["fact"])
    assert all("author" not in h.signals and "time" not in h.signals for h in hits)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("When did Caroline go to the support group?", True),
        ("  when was it", True),
        ("What year did she move?", True),
        ("How long ago was the trip?", True),
        ("Since when has he painted?", True),
        ("What did Caroline say when she left?", False),
        ("Where does Melanie live?", False),
    ],
)
def test_asks_when(query, expected):
    assert asks_when(query) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I went yesterday", True),
        ("two weeks ago", True),
        ("we met last summer", True),
        ("see you on Friday", True),
        ("back in 2019", True),
        ("on 7 May it rained", True),
        ("You may like it", False),
        ("I love painting", False),
    ],
)
def test_says_when(text, expected):
    assert says_when(text) is expected


def test_named_authors_are_whole_words_in_any_case():
    authors = {"Melanie", "Jon", "Mary Ann"}
    assert named_authors("What does melanie's kid like?", authors) == {"melanie"}
    assert named_authors("Did Jonathan call?", authors) == set()
    assert named_authors("What did MARY ANN and Jon say?", authors) == {"mary ann", "jon"}
