"""The coarse scan: numpy and the compiled scan (the fast extra, numba) must give the same
distances, the same nearest codes and the same asymmetric scores; without numba, search
falls back to numpy."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from navi_desktop.memory import NewMemory, hamming
from navi_desktop.memory.doctor import NOTE, examine
from navi_desktop.memory.hamming import EXCLUDED, nearest, numpy_distances
from navi_desktop.memory.store import MemoryStore
from navi_desktop.memory.vectors import (
    MEMORY,
    MESSAGE,
    BitIndex,
    _bit_sum_table,
    _set_bit_sums,
    cosines,
    int8_codes,
    sign_bits,
)
from tests.fakes import BagOfWordsEmbedder


def _brute(codes: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Hamming distances the slow, obvious way: unpack every bit."""
    rows = codes.T.copy().view(np.uint8)
    bits = np.unpackbits(rows ^ q.view(np.uint8), axis=1)
    return bits.sum(axis=1).astype(np.uint16)


def _codes(n: int, words: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 2**64, size=(words, n), dtype=np.uint64, endpoint=False)
    return codes, rng.integers(0, 2**64, size=words, dtype=np.uint64, endpoint=False)


def _reference(dist: np.ndarray, k: int) -> np.ndarray:
    """The k smallest, ties to the earlier position, excluded codes never."""
    order = np.lexsort((np.arange(len(dist)), dist))
    return order[dist[order] != EXCLUDED][:k]


@pytest.mark.parametrize(("n", "words"), [(1, 12), (70_001, 12), (5_000, 2)])
def test_numpy_distances_match_counting_every_bit(n, words):
    codes, q = _codes(n, words, seed=n)
    dist = np.empty(n, dtype=np.uint16)
    numpy_distances(codes, q, dist)  # 70,001: a block boundary and a short last block
    np.testing.assert_array_equal(dist, _brute(codes, q))


def test_the_compiled_scan_gives_numpys_distances_for_every_owner():
    compiled = hamming.kernels()
    assert compiled is not None, "the test extra installs numba"
    codes, q = _codes(50_003, 12, seed=1)
    owners = (np.random.default_rng(2).random(50_003) < 0.3).astype(np.int8)
    expected = _brute(codes, q)
    for owner in (-1, MEMORY, MESSAGE):
        dist = np.full(50_003, 7, dtype=np.uint16)  # whatever was there before is overwritten
        for start, stop in hamming.parts(50_003, 3):  # in parts, as threads scan them
            compiled.distances(codes, q, owners, owner, dist, start, stop)
        wanted = expected.copy()
        if owner >= 0:
            wanted[owners != owner] = EXCLUDED
        np.testing.assert_array_equal(dist, wanted)


def test_the_compiled_scores_match_numpys():
    compiled = hamming.kernels()
    assert compiled is not None
    rng = np.random.default_rng(4)
    for dim in (768, 100):  # whole words, and codes padded to them
        vectors = rng.standard_normal((3_000, dim)).astype(np.float32)
        index = BitIndex("m", dim)
        index.extend(list(range(3_000)), [MEMORY] * 3_000, list(sign_bits(vectors)))
        codes = index.snapshot().codes
        query = rng.standard_normal(dim).astype(np.float32)
        positions = rng.permutation(3_000)[:700]
        out = np.empty(700, dtype=np.float32)
        compiled.sums(codes, positions, _bit_sum_table(query, len(codes) * 8), out)
        expected = (vectors[positions] > 0).astype(np.float32) @ query
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-3)
        bytes_ = codes[:, positions].T.copy().view(np.uint8)
        np.testing.assert_allclose(out, _set_bit_sums(bytes_, query), rtol=1e-4, atol=1e-3)


def test_the_compiled_cosines_match_numpys_and_a_bad_copy_still_ranks_last():
    compiled = hamming.kernels()
    assert compiled is not None
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((1_000, 768)).astype(np.float32)
    stored = [code.tobytes() for code in int8_codes(vectors)]
    stored[3], stored[9] = bytes(768), b"short"  # a row of zeros, a damaged row's copy
    query = rng.standard_normal(768).astype(np.float32)
    fast = cosines(query, stored, compiled)
    np.testing.assert_allclose(fast, cosines(query, stored), atol=1e-6)
    assert fast[3] == 0.0 and fast[9] == -2.0
    exact = vectors @ query / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query))
    others = [i for i in range(1_000) if i not in (3, 9)]
    np.testing.assert_allclose(fast[others], exact[others], atol=2e-3)  # int8's rounding


def test_nearest_is_the_k_smallest_with_ties_to_the_earlier_code():
    rng = np.random.default_rng(8)
    # Few distinct distances: ties everywhere, which a partition would break at random.
    dist = rng.integers(0, 12, size=40_000).astype(np.uint16)
    dist[rng.random(40_000) < 0.4] = EXCLUDED
    valid = int(np.count_nonzero(dist != EXCLUDED))
    for k in (1, 10, 999, 6_400, valid):
        np.testing.assert_array_equal(nearest(dist, k), _reference(dist, k))
    assert len(nearest(dist, 0)) == 0


def test_nearest_looks_again_when_the_sample_misjudges_the_distances():
    # Every 16th code (the ones sampled) is near, every other one far: the sample's estimate
    # holds only a sixteenth of what is wanted, and the search must widen until it is found.
    dist = np.full(16_000, 500, dtype=np.uint16)
    dist[::16] = 3
    dist[5] = 2
    found = nearest(dist, 3_000)
    np.testing.assert_array_equal(found, _reference(dist, 3_000))
    assert found[0] == 5 and len(found) == 3_000


def test_a_large_index_finds_the_same_candidates_either_way(monkeypatch):
    rng = np.random.default_rng(9)
    vectors = rng.standard_normal((20_000, 768)).astype(np.float32)
    owners = [MEMORY if i % 3 else MESSAGE for i in range(20_000)]
    index = BitIndex("m", 768)
    index.extend(list(range(1, 20_001)), owners, list(sign_bits(vectors)))
    codes = index.snapshot()
    query = vectors[7] + 0.1 * rng.standard_normal(768).astype(np.float32)
    bits = sign_bits(query).tobytes()
    monkeypatch.setattr(hamming, "KERNEL_MIN", 10**9)
    assert hamming.compiled(len(codes)) is None
    plain = [codes.candidates(bits, 50, owner, query) for owner in (MEMORY, MESSAGE, None)]
    monkeypatch.setattr(hamming, "KERNEL_MIN", 1_000)
    assert hamming.compiled(len(codes)) is not None
    fast = [codes.candidates(bits, 50, owner, query) for owner in (MEMORY, MESSAGE, None)]
    # The same candidates; float sums in another order may swap two with equal scores.
    for a, b in zip(plain, fast, strict=True):
        assert len(set(a) ^ set(b)) <= 2
    assert 8 in fast[0] and all(owners[i - 1] == MESSAGE for i in fast[1])


def test_without_numba_the_scan_is_numpys(monkeypatch):
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "numba", None)  # import numba now fails
        m.setattr(hamming, "_active", None)
        hamming.kernels.cache_clear()
        assert hamming.kernels() is None
        assert hamming.scan_name(10**7).startswith("numpy (no numba")
        codes, q = _codes(hamming.KERNEL_MIN, 2, seed=3)
        owners = np.zeros(hamming.KERNEL_MIN, dtype=np.int8)
        np.testing.assert_array_equal(hamming.distances(codes, q, owners, None), _brute(codes, q))
        hamming.warm()  # nothing to warm, and no failure
        assert hamming.compiled(10**7) is None
    hamming.kernels.cache_clear()
    assert hamming.scan_name(10**7).startswith("compiled (numba")


def test_a_scan_that_fails_to_compile_leaves_numpy_scanning(monkeypatch, caplog):
    def broken():
        raise RuntimeError("LLVM says no")

    def failing(*args):
        broken()

    failing._cache = SimpleNamespace(flush=lambda: None)  # a dispatcher's cache, to drop
    fake = hamming.Kernels(distances=failing, sums=failing, cosines=failing)
    monkeypatch.setattr(hamming, "kernels", lambda: fake)
    monkeypatch.setattr(hamming, "_active", None)
    monkeypatch.setattr(hamming, "_failed", False)
    assert hamming.compiled(10**7) is None  # tried once, on first use
    assert "numpy scans instead: LLVM says no" in caplog.text
    codes, q = _codes(hamming.KERNEL_MIN, 2, seed=5)
    owners = np.zeros(hamming.KERNEL_MIN, dtype=np.int8)
    np.testing.assert_array_equal(hamming.distances(codes, q, owners, None), _brute(codes, q))
    assert caplog.text.count("LLVM says no") == 1  # not tried again


def test_the_numpy_scan_can_be_asked_for(monkeypatch):
    monkeypatch.setenv("NAVI_NUMPY_SCAN", "1")
    hamming.kernels.cache_clear()
    try:
        assert hamming.kernels() is None
    finally:
        hamming.kernels.cache_clear()


async def test_a_large_profile_warms_the_compiled_scan_and_searches_alike(tmp_path, monkeypatch):
    """A store whose index passes KERNEL_MIN warms the compiled scan while it loads, and its
    searches find what the numpy scan finds."""
    path = tmp_path / "memory.db"
    embedder = BagOfWordsEmbedder("test/bow-128", 128)
    facts = [
        NewMemory(f"note {i} about garden {i % 11} and tools", key=f"k{i}") for i in range(300)
    ]
    warmed: list[bool] = []
    real_warm = hamming.warm
    monkeypatch.setattr(hamming, "warm", lambda: (warmed.append(True), real_warm()))
    monkeypatch.setattr(hamming, "_active", None)
    async with await MemoryStore.open(path, embedder=embedder) as store:
        await store.add_memories(facts)
        await store.backfill_embeddings()
    results = {}
    for kernel_min in (10**9, 50):
        monkeypatch.setattr(hamming, "KERNEL_MIN", kernel_min)
        async with await MemoryStore.open(path, embedder=embedder) as store:
            store.tuning = replace(store.tuning, rerank=20)  # a shortlist shorter than the index
            hits = await store.search("garden 4 tools", limit=20)
            results[kernel_min] = [hit.memory.id for hit in hits if hit.memory is not None]
    assert warmed == [True]  # while the store past KERNEL_MIN loaded, and not again
    assert hamming.compiled(300) is not None
    assert len(results[50]) == 20 and results[50] == results[10**9]


async def test_doctor_suggests_the_fast_extra_only_for_a_large_profile_without_it(
    tmp_path, monkeypatch
):
    path = tmp_path / "memory.db"
    embedder = BagOfWordsEmbedder("test/bow-64", 64)
    async with await MemoryStore.open(path, embedder=embedder) as store:
        await store.add_memories([NewMemory(f"fact {i}", key=f"k{i}") for i in range(30)])
        await store.backfill_embeddings()

    def notes() -> list[str]:
        return [f.fix or "" for f in examine(path).findings if f.level == NOTE]

    monkeypatch.setattr(hamming, "KERNEL_MIN", 30)
    assert not any("fast" in fix for fix in notes())  # numba is installed here
    monkeypatch.setattr(hamming, "installed", lambda: False)
    assert any("navi-desktop[fast]" in fix for fix in notes())
    monkeypatch.setattr(hamming, "KERNEL_MIN", 31)  # 30 vectors: too few to matter
    assert not any("fast" in fix for fix in notes())


def test_with_nowhere_to_cache_the_scan_is_compiled_each_time(monkeypatch):
    """A read-only install run by a user without a home: numba finds no place for its cache
    and refuses cache=True; the scan is compiled without one (and still matches numpy)."""
    import numba.core.caching

    monkeypatch.setattr(numba.core.caching.CacheImpl, "_locator_classes", [])
    hamming.kernels.cache_clear()
    try:
        fast = hamming.kernels()
        assert fast is not None and type(fast.distances._cache).__name__ == "NullCache"
        codes, q = _codes(3_001, 12, seed=6)
        dist = np.empty(3_001, dtype=np.uint16)
        fast.distances(codes, q, np.zeros(3_001, np.int8), -1, dist, 0, 3_001)
        np.testing.assert_array_equal(dist, _brute(codes, q))
    finally:
        hamming.kernels.cache_clear()


def test_a_damaged_cache_file_is_compiled_afresh(tmp_path):
    """numba's cache files are unpickled on load: garbage in one (a disk error, a cut write)
    made the compiled scan unavailable on every start. Its index is dropped and the code
    compiled again, which writes a good cache for the next start. (Separate processes: a
    process keeps what it loaded.)"""
    script = (
        "from navi_desktop.memory import hamming; hamming.warm();"
        " print('ready' if hamming._active else 'failed')"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    env.pop("NAVI_NUMPY_SCAN", None)

    def start() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
        )

    assert start().stdout.strip() == "ready"
    cached = list(tmp_path.rglob("*.nbc"))
    assert cached
    for path in cached:
        path.write_bytes(b"\x80 not a pickle")
    damaged = start()
    assert damaged.stdout.strip() == "ready" and "unavailable" not in damaged.stderr
    assert all(path.read_bytes() != b"\x80 not a pickle" for path in tmp_path.rglob("*.nbc"))
    assert start().stdout.strip() == "ready"


def test_a_cache_that_cannot_be_written_still_gives_the_compiled_scan(tmp_path, monkeypatch):
    """A full disk where numba keeps its cache: the functions compile but their cache does
    not save. They are compiled without a cache, at each start, and used."""
    import numba.core.caching

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))  # nothing cached there yet
    monkeypatch.setattr(numba.core.caching.IndexDataCacheFile, "save", full)
    monkeypatch.setattr(hamming, "_active", None)
    monkeypatch.setattr(hamming, "_failed", False)
    hamming.kernels.cache_clear()
    try:
        fast = hamming.compiled(10**7)
        assert fast is not None and type(fast.distances._cache).__name__ == "NullCache"
        codes, q = _codes(hamming.KERNEL_MIN, 12, seed=7)
        owners = np.zeros(hamming.KERNEL_MIN, dtype=np.int8)
        np.testing.assert_array_equal(hamming.distances(codes, q, owners, None), _brute(codes, q))
    finally:
        hamming.kernels.cache_clear()


def test_parts_cover_every_code_once_in_whole_blocks():
    for n, count in ((1_000_000, 2), (1_000, 3), (1, 2), (64, 4), (0, 2)):
        found = hamming.parts(n, count)
        assert [i for start, stop in found for i in range(start, stop)] == list(range(n))
        assert len(found) <= count and all(start % 64 == 0 for start, _ in found)


async def test_a_scan_split_across_the_read_threads_finds_the_same(tmp_path, monkeypatch):
    """Past SPLIT_MIN the scan runs in parts on every read thread before the other signals,
    once for memories and messages together; searches find what one whole scan finds."""
    from navi_desktop.memory import vector_search

    embedder = BagOfWordsEmbedder("test/bow-128", 128)
    path = tmp_path / "memory.db"
    async with await MemoryStore.open(path, embedder=embedder) as store:
        await store.add_memories(
            [NewMemory(f"note {i} about garden {i % 7} and tools", key=f"k{i}") for i in range(150)]
        )
        session = await store.create_session("chat")
        for i in range(150):
            await store.save_message(session.id, "user", f"the garden {i % 5} needs tools {i}")
        await store.backfill_embeddings()
    scans: list[tuple[int, int]] = []
    real_scan = hamming.scan_part
    monkeypatch.setattr(hamming, "scan_part", lambda *a: (scans.append(a[-2:]), real_scan(*a))[1])
    found = {}
    for split_min in (10**9, 1):
        monkeypatch.setattr(vector_search, "SPLIT_MIN", split_min)
        async with await MemoryStore.open(path, embedder=embedder) as store:
            store.tuning = replace(store.tuning, rerank=20)  # a shortlist shorter than the index
            for kinds in (None, ["message"], ["fact", "message"]):
                scans.clear()
                hits = await store.search("garden 4 tools", limit=30, kinds=kinds)
                found[split_min, str(kinds)] = [(h.kind, h.id, h.score) for h in hits]
                if split_min == 1:  # one scan, in parts: both owners' codes at once
                    assert sorted(scans) == hamming.parts(300, store.db._readers.SIZE)
    for kinds in (None, ["message"], ["fact", "message"]):
        assert len(found[1, str(kinds)]) >= 10
        assert found[1, str(kinds)] == found[10**9, str(kinds)]
