"""The coarse scan of the 1-bit index: Hamming distances from a query to every code, and the
k nearest of them.

numpy does the scan in three passes per 64-bit word (XOR, popcount, add): ~21 ms at 1M codes of
768 bits on one core here, where reading the codes once takes ~9 ms. With the optional ``fast``
extra (numba), one compiled loop per word does all three (~11 ms). Either way the nearest are
the k smallest distances, ties going to the earlier code.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

HAMMING_BLOCK = 65536  # codes at a time through the numpy scan's buffers (see numpy_distances)
# The compiled scan is used from this many codes on. Below it numpy takes ~2 ms or less, and
# importing numba (~0.4 s) and loading its compiled code is not worth it.
KERNEL_MIN = 200_000
EXCLUDED = np.iinfo(np.uint16).max  # the distance given to codes of another owner

log = logging.getLogger(__name__)


def distances(
    codes: np.ndarray, q: np.ndarray, owners: np.ndarray, owner: int | None
) -> np.ndarray:
    """Hamming distances (uint16) of ``codes`` ((words, n) uint64) to ``q``; codes whose owner
    is not ``owner`` get EXCLUDED."""
    dist = np.empty(codes.shape[1], dtype=np.uint16)
    scan_part(codes, q, owners, owner, dist, 0, len(dist))
    return dist


def scan_part(
    codes: np.ndarray,
    q: np.ndarray,
    owners: np.ndarray,
    owner: int | None,
    dist: np.ndarray,
    start: int,
    stop: int,
) -> None:
    """distances() of the codes from ``start`` to ``stop``, into the same part of ``dist``.
    Parts can be scanned on several threads at once: both scans release the GIL."""
    fast = compiled(codes.shape[1])
    if fast is not None:
        fast.distances(codes, q, owners, -1 if owner is None else owner, dist, start, stop)
        return
    part = dist[start:stop]
    numpy_distances(codes[:, start:stop], q, part)
    if owner is not None:
        part[owners[start:stop] != owner] = EXCLUDED


def parts(n: int, count: int) -> list[tuple[int, int]]:
    """``n`` codes as ``count`` (start, stop) ranges of about equal size, in whole blocks."""
    size = -(-n // max(1, count) // 64) * 64
    return [(start, min(n, start + size)) for start in range(0, n, size)] if n else []


def numpy_distances(codes: np.ndarray, q: np.ndarray, dist: np.ndarray) -> None:
    """Hamming distances into ``dist``, a block of codes at a time through buffers that stay
    in the CPU's cache: at 1M codes, whole-row temporaries made the scan ~1.5x slower."""
    n = len(dist)
    size = min(n, HAMMING_BLOCK)
    xor = np.empty(size, dtype=np.uint64)
    ones = np.empty(size, dtype=np.uint8)
    acc = np.empty(size, dtype=np.uint16)  # at most 64 * words bits differ
    for start in range(0, n, size):
        stop = min(n, start + size)
        x, o, a = xor[: stop - start], ones[: stop - start], acc[: stop - start]
        a[:] = 0
        for word, q_word in zip(codes, q, strict=True):
            np.bitwise_xor(word[start:stop], q_word, out=x)
            np.bitwise_count(x, out=o)
            a += o
        dist[start:stop] = a


def nearest(dist: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k smallest of ``dist``, nearest first, ties to the earlier position;
    k must not exceed the codes not EXCLUDED. A distance that at least k codes are within is
    estimated from every 16th code (then checked), and only the codes within it are sorted:
    ~1 ms at 1M codes, where partitioning the whole array took ~3 ms."""
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    sample = np.bincount(dist[::16])
    # A margin over the sample's share: too few within it costs a second look, no more.
    limit = int(np.searchsorted(np.cumsum(sample), k / 16 * 1.25 + 8))
    while True:
        limit = min(limit, int(EXCLUDED) - 1)
        within = np.flatnonzero(dist <= limit)
        if len(within) >= k or limit == EXCLUDED - 1:
            break
        limit = limit * 2 + 1
    return within[np.argsort(dist[within], kind="stable")[:k]]


# -- the compiled scan (the fast extra) -----------------------------------------------------


class Kernels(NamedTuple):
    distances: Callable[..., None]  # _scan
    sums: Callable[..., None]  # _sums
    cosines: Callable[..., None]  # _cosines


def installed() -> bool:
    """Whether numba can be imported (without importing it: ~0.4 s)."""
    return importlib.util.find_spec("numba") is not None


@functools.cache
def kernels() -> Kernels | None:
    """The compiled functions, or None without numba (or with NAVI_NUMPY_SCAN=1). Compiled
    on first use and cached on disk by numba."""
    if os.environ.get("NAVI_NUMPY_SCAN") == "1":
        return None
    try:
        import numba  # noqa: F401
    except ImportError:
        return None
    try:
        return _compile(cache=True)
    except RuntimeError:  # nowhere to cache (a read-only install, no home): compile each time
        return _compile(cache=False)


def _compile(cache: bool) -> Kernels:
    import numba

    return Kernels(
        *(numba.njit(nogil=True, cache=cache)(f) for f in (_scan, _sums)),
        # fastmath lets LLVM reorder the float sums into vector lanes: ~0.25 ms for 1,000
        # int8 copies of 768-d, against ~1.4 ms in numpy; the cosines differ by ~1e-7.
        numba.njit(nogil=True, cache=cache, fastmath=True)(_cosines),
    )


_active: Kernels | None = None  # the compiled functions warm() got working
_failed = False  # warm() failed: numpy scans from then on


def compiled(codes: int) -> Kernels | None:
    """The compiled functions for an index of ``codes`` codes, when it is large enough. An
    index that grew past KERNEL_MIN after loading gets them ready here, on first use."""
    if codes < KERNEL_MIN:
        return None
    if _active is None and not _failed:
        warm()
    return _active


def warm() -> None:
    """Import, load or compile the compiled functions now, with the argument types searches
    give them, so that the first search does not wait. Never raises: a failure is logged and
    numpy does the scans."""
    global _active, _failed
    if _active is not None or _failed:
        return
    try:
        fast = kernels()
        if fast is not None:
            _active = _working(fast)
    except Exception as exc:  # an LLVM failure must not cost the vector search
        _failed = True
        log.warning("the compiled vector scan is unavailable, numpy scans instead: %s", exc)


def _working(fast: Kernels) -> Kernels:
    """``fast``, or what works in its place when numba's cache does not."""
    try:
        _exercise(fast)
        return fast
    except Exception:
        # A damaged cache file (numba's, beside this module or in its cache folder) fails
        # to load: drop the cache's index and compile afresh, which writes a good one.
        for function in fast:
            function._cache.flush()  # type: ignore[attr-defined]
    try:
        _exercise(fast)
        return fast
    except OSError:  # the cache cannot be written (a full disk): compiled at each start
        uncached = _compile(cache=False)
        _exercise(uncached)
        return uncached


def _exercise(fast: Kernels) -> None:
    """Each compiled function called once, on tiny arrays of the types searches pass."""
    codes = np.zeros((2, 3), dtype=np.uint64)
    q = np.frombuffer(bytes(16), dtype=np.uint64)  # read-only, as a query's code is
    fast.distances(codes, q, np.zeros(3, np.int8), -1, np.empty(3, np.uint16), 0, 3)
    table = np.zeros(2 * 8 * 256, dtype=np.float32)
    fast.sums(codes, np.arange(2), table, np.empty(2, np.float32))
    int8 = np.frombuffer(bytes(6), dtype=np.int8).reshape(2, 3)  # read-only, as rows' bytes are
    fast.cosines(int8, np.ones(3, np.float32), np.empty(2, np.float32))


def scan_name(codes: int) -> str:
    """Which scan an index of ``codes`` codes gets, for reports."""
    if codes < KERNEL_MIN:
        return f"numpy (under {KERNEL_MIN:,} codes)"
    if compiled(codes) is None:
        return "numpy (no numba: the fast extra is not installed, NAVI_NUMPY_SCAN=1, or it failed)"
    from importlib.metadata import version

    return f"compiled (numba {version('numba')})"


def _scan(
    codes: np.ndarray,
    q: np.ndarray,
    owners: np.ndarray,
    owner: int,
    dist: np.ndarray,
    start: int,
    stop: int,
) -> None:  # pragma: no cover - compiled by numba (the tests run it against numpy_distances)
    """For the codes from ``start`` to ``stop``: XOR, popcount and sum, one word's row at a
    time straight through. LLVM turns these loops into vector instructions (popcount in its
    bit-twiddling form), which it did not for a blocked loop (2x slower). Other owners' codes
    are marked in a last pass (all bits set: EXCLUDED)."""
    words = codes.shape[0]
    m1, m2, m4 = (
        np.uint64(0x5555555555555555),
        np.uint64(0x3333333333333333),
        np.uint64(0x0F0F0F0F0F0F0F0F),
    )
    h01, one, two, four, top = (
        np.uint64(0x0101010101010101),
        np.uint64(1),
        np.uint64(2),
        np.uint64(4),
        np.uint64(56),
    )
    # Slices indexed from 0: looping from start to stop over the whole arrays, LLVM left
    # the loop less vectorised (19 ms at 1M codes against 11 ms).
    out, size = dist[start:stop], stop - start
    for i in range(size):
        out[i] = 0
    for w in range(words):
        qw, row = q[w], codes[w, start:stop]
        for i in range(size):
            x = row[i] ^ qw
            x = x - ((x >> one) & m1)
            x = (x & m2) + ((x >> two) & m2)
            x = (x + (x >> four)) & m4
            out[i] += np.uint16((x * h01) >> top)
    if owner >= 0:
        mine, own = np.int8(owner), owners[start:stop]
        for i in range(size):  # without a branch: ~0.1 ms at 1M codes, where an if took ~6 ms
            out[i] |= np.uint16(0) - np.uint16(own[i] != mine)


def _sums(
    codes: np.ndarray, positions: np.ndarray, table: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled by numba (the tests run it against numpy)
    """For the code at each of ``positions``, the sum of the query's values where its bits
    are set, read from ``table`` (vectors._bit_sum_table) a byte at a time. The codes are
    gathered a word's row at a time first: that many independent reads from memory overlap,
    where reading each code's words in turn took twice as long (1.4 against 2.9 ms for
    6,400 codes; numpy's gather and index arithmetic: ~5 ms)."""
    words, count = codes.shape[0], positions.shape[0]
    mask = np.uint64(255)
    gathered = np.empty((count, words), dtype=np.uint64)
    for w in range(words):
        row = codes[w]
        for j in range(count):
            gathered[j, w] = row[positions[j]]
    for j in range(count):
        total = np.float32(0)
        for w in range(words):
            x, base = gathered[j, w], w * 2048
            for b in range(8):
                total += table[base + b * 256 + np.intp((x >> np.uint64(8 * b)) & mask)]
        out[j] = total


def _cosines(
    codes: np.ndarray, query: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled by numba (the tests run it against numpy)
    """The cosine of ``query`` (float32) with each row of ``codes`` (int8 copies): 0 for a
    row of zeros, as vectors.cosines gives."""
    rows, dim = codes.shape
    squares = np.float32(0)
    for j in range(dim):
        squares += query[j] * query[j]
    norm = np.sqrt(squares)
    for i in range(rows):
        dot, own = np.float32(0), np.float32(0)
        for j in range(dim):
            value = np.float32(codes[i, j])
            dot += value * query[j]
            own += value * value
        scale = np.sqrt(own) * norm
        out[i] = dot / scale if scale > 0 else np.float32(0)
