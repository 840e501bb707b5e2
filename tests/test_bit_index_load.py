"""Loading the in-memory 1-bit index from the file: each owner's codes come back as one packed
value (see MemoryStore._load_bit_index), and must equal the codes row by row."""

from __future__ import annotations

import numpy as np
import sqlean

from navi_desktop.memory import NewMemory
from navi_desktop.memory.store import MemoryStore
from navi_desktop.memory.vectors import MEMORY, MESSAGE, BitIndex, sign_bits
from tests.fakes import BagOfWordsEmbedder


def same(a: BitIndex, b: BitIndex) -> None:
    first, second = a.snapshot(), b.snapshot()
    assert first.ids.tolist() == second.ids.tolist()
    assert first.owners.tolist() == second.owners.tolist()
    assert np.array_equal(first.codes, second.codes)


def test_packed_codes_load_as_they_do_row_by_row():
    rng = np.random.default_rng(11)
    for dim in (768, 100):  # whole words, and codes padded to them
        vectors = rng.standard_normal((300, dim)).astype(np.float32)
        vectors[7] = -1.0  # a code of zero bytes only
        codes = [c.tobytes() for c in sign_bits(vectors)]
        ids = list(range(5, 305))
        rows = BitIndex("m", dim)
        rows.extend(ids, [MEMORY] * 300, codes)
        packed = BitIndex("m", dim)
        assert packed.extend_packed(",".join(map(str, ids)), MEMORY, b"".join(codes))
        same(rows, packed)
        # One code of another length (a damaged row): refused whole, nothing added.
        assert not packed.extend_packed("1,2", MESSAGE, codes[0] + codes[1][:-1])
        same(rows, packed)


async def test_a_reopened_store_loads_the_codes_it_wrote(tmp_path, monkeypatch):
    monkeypatch.setattr("navi_desktop.memory.store.LOAD_CHUNK", 7)  # chunks, and a last part
    path = tmp_path / "memory.db"
    embedder = BagOfWordsEmbedder("test/bow-100", 100)
    facts = [NewMemory(f"fact number {i} about topic {i % 7}", key=f"k{i}") for i in range(60)]
    async with await MemoryStore.open(path, embedder=embedder) as store:
        await store.add_memories(facts)
        session = await store.create_session("s")
        for i in range(20):
            await store.save_message(session.id, "user", f"message {i} on topic {i % 3}")
        await store.backfill_embeddings()
        written = await store._bit_index(100)  # kept up to date code by code while embedding
        assert len(written) == 80
        rows = await store.db.fetchall("SELECT id, memory_id IS NULL, bits FROM embeddings")
        expected = BitIndex(embedder.model, 100)
        expected.extend(
            [r[0] for r in rows], [MESSAGE if r[1] else MEMORY for r in rows], [r[2] for r in rows]
        )
        same(written, expected)
    async with await MemoryStore.open(path, embedder=embedder) as store:
        same(await store._bit_index(100), expected)
    with sqlean.connect(str(path)) as conn:  # one message's code cut short, as damage would
        conn.execute("UPDATE embeddings SET bits = substr(bits, 1, 5) WHERE message_id = 3")
    conn.close()
    async with await MemoryStore.open(path, embedder=embedder) as store:
        loaded = (await store._bit_index(100)).snapshot()
        assert len(loaded) == 80 and MESSAGE in loaded.owners.tolist()
        hits = await store.search("topic 3", kinds=["fact", "message"])
        assert hits
