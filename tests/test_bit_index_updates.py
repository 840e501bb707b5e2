"""Removing and adding codes in the in-memory 1-bit index in any order: an id removed and
then added again (SQLite gives a new row the id of a deleted highest one) keeps its new code,
an id added and then removed is gone, with or without a snapshot in between. Checked against
a plain dict of what the index should hold, and through a real store."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from navi_desktop.memory import MemoryStore
from navi_desktop.memory.documents import text_digest
from navi_desktop.memory.vectors import MEMORY, MESSAGE, BitIndex
from tests.fakes import BagOfWordsEmbedder
from tests.pipeline_helpers import found_by_meaning

DIM = 64
X, Y = 7, 8  # X: the id reused; Y: an id beside it


def code(n: int) -> bytes:
    """A distinct code for each n."""
    return int(n).to_bytes(DIM // 8, "little")


def held(index: BitIndex) -> dict[int, tuple[int, bytes]]:
    """What a snapshot of the index holds: id -> (owner, code); an id twice fails."""
    snap = index.snapshot()
    assert len(set(snap.ids.tolist())) == len(snap)
    if snap.codes is None:
        return {}
    raw = snap.codes.T.copy().view(np.uint8)
    return {
        int(i): (int(o), raw[n].tobytes())
        for n, (i, o) in enumerate(zip(snap.ids, snap.owners, strict=True))
    }


def valid(steps: tuple[str, ...], start: dict[int, tuple[int, bytes]]) -> bool:
    """Whether each add is of an id not held then, as the store's are (a new row's id)."""
    ids = set(start)
    for step in steps:
        verb, _, name = step.partition(" ")
        key = {"X": X, "Y": Y}.get(name, 0)
        if verb == "add" and key in ids:
            return False
        (ids.add if verb == "add" else ids.discard)(key)
    return True


def run(steps: tuple[str, ...], start: dict[int, tuple[int, bytes]]) -> None:
    """Apply ``steps`` ("add X", "remove X", "add Y", "remove Y", "snapshot") to an index
    holding ``start`` and to a dict, and compare them at each snapshot and at the end."""
    assert valid(steps, start), steps
    index = BitIndex("m", DIM)
    index.extend(list(start), [o for o, _ in start.values()], [c for _, c in start.values()])
    expected = dict(start)
    for n, step in enumerate(steps):
        verb, _, name = step.partition(" ")
        key = {"X": X, "Y": Y}.get(name, 0)
        if verb == "add":
            entry = (MEMORY if n % 2 else MESSAGE, code(100 + n))
            index.add(key, *entry)
            expected[key] = entry
        elif verb == "remove":
            index.remove({key})
            expected.pop(key, None)
        else:
            assert held(index) == expected, steps
    assert held(index) == expected, steps
    assert len(index) == len(expected)


NAMED = {
    "add then remove": ("add X", "remove X"),
    "remove then add": ("remove X", "add X"),
    "remove, add, remove": ("remove X", "add X", "remove X"),
    "add, remove, add": ("add X", "remove X", "add X"),
    "remove, snapshot, add": ("remove X", "snapshot", "add X"),
    "add, snapshot, remove, add": ("add X", "snapshot", "remove X", "add X"),
    "remove, add, snapshot, remove": ("remove X", "add X", "snapshot", "remove X"),
    "remove, add, remove, add": ("remove X", "add X", "remove X", "add X"),
}
STARTS = {
    "X held": {X: (MEMORY, code(1)), 1: (MEMORY, code(2))},
    "X not held": {1: (MEMORY, code(2))},
    "empty": {},
}


CASES = {  # an add of an id held is left out: no store does it (a row's id is unique)
    f"{name}, {where}": (steps, start)
    for name, steps in NAMED.items()
    for where, start in STARTS.items()
    if valid(steps, start)
}


@pytest.mark.parametrize(("steps", "start"), CASES.values(), ids=CASES.keys())
def test_each_interleaving_of_one_id(steps, start):
    run(steps, start)


def test_every_sequence_of_up_to_six_steps():
    ops = ("add X", "remove X", "add Y", "remove Y", "snapshot")
    runs = 0
    for start in STARTS.values():
        for length in range(1, 7):
            for steps in itertools.product(ops, repeat=length):
                if valid(steps, start):
                    run(steps, start)
                    runs += 1
    assert runs > 1000


def test_a_removal_leaves_the_arrays_as_they_are():
    """A batch's removal costs the batch, not the index: the arrays (all the codes) are
    rebuilt at the next snapshot only, not by each remove(). (It rebuilt them every batch of
    the embedding pass: 51 ms a batch at 1M codes, on the event loop.)"""
    index = BitIndex("m", DIM)
    index.extend([1, 2, 3], [MEMORY] * 3, [code(1), code(2), code(3)])
    arrays = index.snapshot()
    index.add(4, MEMORY, code(4))  # added, not yet in the arrays
    index.remove({2, 4})
    index.add(2, MESSAGE, code(5))
    assert index.ids is arrays.ids and index.codes is arrays.codes
    assert held(index) == {1: (MEMORY, code(1)), 2: (MESSAGE, code(5)), 3: (MEMORY, code(3))}


async def index_matches_file(store: MemoryStore) -> None:
    """The store's index holds exactly the file's codes of its model and size."""
    index = await store._bit_index(DIM)
    assert index is not None
    rows = await store.db.fetchall(
        "SELECT id, memory_id IS NULL, bits FROM embeddings WHERE model = ? AND dim = ?",
        (index.model, DIM),
    )
    assert held(index) == {r[0]: (MESSAGE if r[1] else MEMORY, r[2]) for r in rows}


async def newest_vector(store: MemoryStore) -> tuple[int, int]:
    """(embedding id, memory id) of the newest vector."""
    row = await store.db.fetchone("SELECT id, memory_id FROM embeddings ORDER BY id DESC LIMIT 1")
    return row[0], row[1]


@pytest.mark.parametrize("searched", [False, True], ids=["not searched", "searched between"])
async def test_a_vector_replaced_under_a_reused_id_is_found_by_meaning(tmp_path, searched):
    embedder = BagOfWordsEmbedder("test/bow-64", DIM)
    values = ["drinks green tea", "lives in Porto", "rides a red bicycle"]
    async with await MemoryStore.open(tmp_path / "memory.db", embedder=embedder) as store:
        for value in values:
            await store.add_memory(value)
        await store.backfill_embeddings()  # the codes wait to be added to the arrays
        if searched:
            assert await found_by_meaning(store, values[0])
        eid, mid = await newest_vector(store)
        # The newest vector made again (two passes that picked the same text): its row is
        # deleted and inserted again, under the same id.
        text = "rides a red bicycle"
        vectors = await embedder.embed([text], query=False)
        async with store.db.transaction():
            await store._store_vectors("memory_id", [mid], [text_digest(text)], vectors)
        assert await newest_vector(store) == (eid, mid)
        await index_matches_file(store)
        assert await found_by_meaning(store, text)
        # Its text edited: the vector goes (removed), and the pass makes a new one under the
        # same id again (added).
        await store.edit(mid, value="collects old maps")
        if searched:
            assert await found_by_meaning(store, values[0])
        await store.backfill_embeddings()
        assert await newest_vector(store) == (eid, mid)
        await index_matches_file(store)
        assert await found_by_meaning(store, "collects old maps")
        # Edited again and not made again yet: no code left for it.
        await store.edit(mid, value="keeps bees")
        await index_matches_file(store)
