"""The in-memory 1-bit index behind the vector signal."""

from __future__ import annotations

import numpy as np

from navi_desktop.memory.vectors import MEMORY, MESSAGE, BitIndex, _set_bit_sums, sign_bits


def _index(vectors: np.ndarray, owners: list[int]) -> BitIndex:
    index = BitIndex("m", vectors.shape[1])
    index.extend(list(range(1, len(vectors) + 1)), owners, list(sign_bits(vectors)))
    return index


def test_set_bit_sums_match_the_unpacked_product():
    rng = np.random.default_rng(7)
    for dim in (768, 100):  # whole bytes, and a dimension padded to them
        vectors = rng.standard_normal((50, dim)).astype(np.float32)
        query = rng.standard_normal(dim).astype(np.float32)
        codes = sign_bits(vectors)
        expected = (vectors > 0).astype(np.float32) @ query
        np.testing.assert_allclose(_set_bit_sums(codes, query), expected, rtol=1e-5, atol=1e-4)


def test_candidates_find_near_vectors_of_the_owner_asked_for():
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((2000, 64)).astype(np.float32)
    owners = [MEMORY if i % 2 else MESSAGE for i in range(2000)]
    codes = _index(vectors, owners).snapshot()
    query = vectors[1] + 0.05 * rng.standard_normal(64).astype(np.float32)
    # A shortlist of 100 of the 1000 memories, for the exact re-rank to order.
    found = codes.candidates(sign_bits(query).tobytes(), 100, MEMORY, query)
    assert len(found) == 100 and 2 in found  # id 2 is vectors[1], a memory
    assert all(owners[i - 1] == MEMORY for i in found)
    exact = 1 + np.argsort(-(vectors @ query))
    exact_memories = [int(i) for i in exact if owners[i - 1] == MEMORY][:10]
    assert len(set(found) & set(exact_memories)) >= 8


def test_a_snapshot_is_unchanged_by_later_adds_and_removes():
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((300, 64)).astype(np.float32)
    index = _index(vectors, [MEMORY] * 300)
    before = index.snapshot()
    query = vectors[0]
    bits = sign_bits(query).tobytes()
    first = before.candidates(bits, 5, MEMORY, query)
    index.remove({1, 2, 3})
    index.add(999, MEMORY, bits)
    after = index.snapshot()
    assert len(before) == 300 and len(after) == 298
    assert before.candidates(bits, 5, MEMORY, query) == first
    assert 1 not in after.candidates(bits, 5, MEMORY, query)
    assert 999 in after.candidates(bits, 5, MEMORY, query)
