"""Vector search: a 1-bit coarse scan held in memory, then a cosine re-rank of int8 copies.

Each embedding row stores an int8 copy of the vector (``int8_codes``: each vector scaled so
that its largest component is ±127, sqlite-vec's ``vec_int8`` layout) and its sign bits
(``vec_quantize_binary`` layout). The int8 copy is a quarter of float32's size (768 bytes at
768-d, where a float32 row took a whole 4 KB page), and its cosines differ from the float
ones by 0.0002 on average, 0.0015 at most (768-d benchmark vectors; e5-small: 0.0009 at most).
Scanning 1-bit codes with numpy's popcount costs ~1 ms at 100k vectors for any candidate
count, where sqlite-vec's own ``bit[]`` KNN grows with k (~21 ms at k=100). The Hamming
shortlist is re-scored against the float query, and the best candidates are re-ranked by the
float query's cosine with their int8 copies (``cosines``, vector_search.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

MEMORY, MESSAGE = 0, 1
# The Hamming shortlist that the asymmetric score orders: 8x the candidates wanted, but only
# 4x past 1,600 codes (at 1M codes, 8x cost ~3 ms more for recall@10 0.982 against 0.976).
ASYMMETRIC_SHORTLIST = 8
LARGE_SHORTLIST = (1600, 4)
HAMMING_BLOCK = 65536  # codes scanned at a time (see Codes._distances)


def sign_bits(vectors: np.ndarray) -> np.ndarray:
    """Pack sign bits, least significant bit first, exactly as sqlite-vec's vec_quantize_binary."""
    return np.packbits(vectors > 0, axis=-1, bitorder="little")


def int8_codes(vectors: np.ndarray) -> np.ndarray:
    """Each vector as int8, scaled so that its largest component is ±127 (one scale per
    vector). No scale is stored: a cosine does not depend on it."""
    vectors = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    peak = np.abs(vectors).max(axis=1, keepdims=True)
    peak[peak == 0] = 1.0
    return np.round(vectors * (127 / peak)).astype(np.int8)


def int8_from_float32(blobs: Sequence[bytes]) -> list[bytes]:
    """Stored float32 vectors (files written before the int8 copies) as int8 copies; one
    array per vector size, since a file may hold vectors of several models."""
    out: list[bytes] = [b""] * len(blobs)
    by_size: dict[int, list[int]] = {}
    for i, blob in enumerate(blobs):
        by_size.setdefault(len(blob), []).append(i)
    for size, where in by_size.items():
        floats = np.frombuffer(b"".join(blobs[i] for i in where), dtype=np.float32)
        for i, code in zip(where, int8_codes(floats.reshape(len(where), size // 4)), strict=True):
            out[i] = code.tobytes()
    return out


def cosines(query: np.ndarray, stored: list[bytes]) -> np.ndarray:
    """The cosine of the float ``query`` with each stored int8 copy (a code of the wrong
    length, which a damaged row could hold, gets -2: below any cosine)."""
    dim = len(query)
    out = np.full(len(stored), -2.0, dtype=np.float32)
    fine = [i for i, blob in enumerate(stored) if len(blob) == dim]
    if fine:
        raw = b"".join(stored[i] for i in fine)
        codes = np.frombuffer(raw, dtype=np.int8).reshape(len(fine), dim).astype(np.float32)
        norms = np.sqrt(np.einsum("ij,ij->i", codes, codes)) * float(np.linalg.norm(query))
        norms[norms == 0] = 1.0
        # einsum, not a BLAS product: BLAS's threads would spin on the cores the other
        # signals use (see _set_bit_sums).
        out[fine] = np.einsum("ij,j->i", codes, np.asarray(query, dtype=np.float32)) / norms
    return out


# Each byte value's bits, least significant first: (256, 8).
_BYTE_BITS = np.unpackbits(
    np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little"
).astype(np.float32)


def _set_bit_sums(codes: np.ndarray, query: np.ndarray) -> np.ndarray:
    """For each code (a row of bytes), the sum of the query's values where the code's bit is
    set: (q·sign + Σq) / 2, so the same order as q·sign.

    Read from a table of every byte value's partial sum at every byte position, not by
    unpacking the bits into a matrix product: BLAS was slower here, and its worker threads
    spun on the cores the search's other signals were using."""
    width = codes.shape[1]
    padded = np.zeros(width * 8, dtype=np.float32)
    padded[: len(query)] = query
    table = np.einsum("vi,bi->bv", _BYTE_BITS, padded.reshape(width, 8)).ravel()
    offsets = np.arange(width, dtype=np.intp) * 256
    return np.take(table, codes + offsets).sum(axis=1)


@dataclass
class BitIndex:
    """In-memory copy of one model's sign bits; the database stays the source of truth.

    Codes are held word-major, shape (words, n): the Hamming scan is then one XOR and popcount
    over a contiguous row per 64-bit word, summed into a small integer array, which is ~4x
    faster than reducing an (n, words) array along its short axis (~1 ms vs ~4 ms at 100k).
    """

    model: str
    dim: int
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    owners: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    codes: np.ndarray | None = None  # (dim/64, n) uint64
    _pending: list[tuple[int, int, bytes]] = field(default_factory=list)
    _removed: set[int] = field(default_factory=set)

    def __len__(self) -> int:
        self._flush()
        return len(self.ids)

    @property
    def words(self) -> int:
        return (self.dim + 63) // 64

    def _as_words(self, raw: Sequence[bytes]) -> np.ndarray:
        """Codes as (words, len(raw)) uint64, zero-padded to whole words."""
        width = self.words * 8
        buf = np.zeros((len(raw), width), dtype=np.uint8)
        if raw and all(len(r) == width for r in raw):  # the usual case: one copy for all
            buf[:] = np.frombuffer(b"".join(raw), dtype=np.uint8).reshape(len(raw), width)
        else:
            for i, r in enumerate(raw):
                buf[i, : len(r)] = np.frombuffer(r, dtype=np.uint8)
        return np.ascontiguousarray(buf.view(np.uint64).T)

    def add(self, embedding_id: int, owner: int, bits: bytes) -> None:
        # Appends are batched: rebuilding the arrays per insert would be quadratic.
        self._pending.append((embedding_id, owner, bits))

    def extend(self, ids: Sequence[int], owners: Sequence[int], bits: Sequence[bytes]) -> None:
        """Add many codes at once (loading a whole index)."""
        self._flush()
        if not ids:
            return
        self._append(
            np.asarray(ids, dtype=np.int64), np.asarray(owners, dtype=np.int8), self._as_words(bits)
        )

    def extend_packed(self, ids: str, owner: int, packed: bytes) -> bool:
        """Add one owner's codes given as ``ids`` joined with commas and ``packed``, their
        codes back to back ((dim + 7) // 8 bytes each). False, and nothing added, when the
        bytes do not fit the ids (a code of another length)."""
        numbers = np.fromstring(ids, dtype=np.int64, sep=",")  # ~10x faster than split()
        stride = (self.dim + 7) // 8
        if not isinstance(packed, bytes) or len(packed) != len(numbers) * stride:
            return False
        buf = np.zeros((len(numbers), self.words * 8), dtype=np.uint8)
        buf[:, :stride] = np.frombuffer(packed, dtype=np.uint8).reshape(len(numbers), stride)
        self._flush()
        owners = np.full(len(numbers), owner, dtype=np.int8)
        self._append(numbers, owners, np.ascontiguousarray(buf.view(np.uint64).T))
        return True

    def remove(self, embedding_ids: set[int]) -> None:
        if embedding_ids:
            self._removed |= embedding_ids

    def _append(self, ids: np.ndarray, owners: np.ndarray, codes: np.ndarray) -> None:
        self.ids = np.concatenate([self.ids, ids])
        self.owners = np.concatenate([self.owners, owners])
        self.codes = (
            codes
            if self.codes is None or self.codes.size == 0  # dim may be set after creation
            else np.concatenate([self.codes, codes], axis=1)
        )

    def _flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            self._append(
                np.fromiter((p[0] for p in pending), dtype=np.int64, count=len(pending)),
                np.fromiter((p[1] for p in pending), dtype=np.int8, count=len(pending)),
                self._as_words([p[2] for p in pending]),
            )
        if self._removed:
            keep = ~np.isin(self.ids, np.fromiter(self._removed, dtype=np.int64))
            self._removed.clear()
            self.ids, self.owners = self.ids[keep], self.owners[keep]
            if self.codes is not None:
                self.codes = self.codes[:, keep]

    def snapshot(self) -> Codes:
        """The codes as they are now, for a scan in another thread: the arrays are replaced,
        never changed in place, so later adds and removes do not touch a snapshot."""
        self._flush()
        return Codes(self.ids, self.owners, self.codes, self.dim)


@dataclass(frozen=True)
class Codes:
    """A fixed set of sign codes (see BitIndex) and the coarse scan over them."""

    ids: np.ndarray
    owners: np.ndarray
    codes: np.ndarray | None  # (words, n) uint64
    dim: int

    def __len__(self) -> int:
        return len(self.ids)

    def candidates(
        self, query_bits: bytes, k: int, owner: int | None = None, query: np.ndarray | None = None
    ) -> list[int]:
        """Embedding ids of the k codes nearest the query (optionally one owner type).

        Hamming distance between sign codes picks a shortlist; with the float ``query``, the
        shortlist is re-scored by the dot product of the query with each code's signs
        (asymmetric distance: only the stored side is quantised), which orders candidates
        far better than Hamming, so fewer full vectors need reading for the exact re-rank.
        """
        if query is not None:
            wanted = min(ASYMMETRIC_SHORTLIST * k, max(LARGE_SHORTLIST[0], LARGE_SHORTLIST[1] * k))
            shortlist = self._hamming(query_bits, wanted, owner)
            if len(shortlist) < wanted:  # a small index: re-rank it all
                return self.ids[shortlist].tolist()
            columns = self.codes[:, shortlist].T.copy().view(np.uint8)  # type: ignore[index]
            best = np.argpartition(-_set_bit_sums(columns, query), k - 1)[:k]
            return self.ids[shortlist[best]].tolist()
        return self.ids[self._hamming(query_bits, k, owner)].tolist()

    @cached_property
    def _owner_counts(self) -> np.ndarray:
        return np.bincount(self.owners, minlength=2)

    def _hamming(self, query_bits: bytes, k: int, owner: int | None) -> np.ndarray:
        """Positions of the k codes nearest in Hamming distance."""
        if self.codes is None or len(self.ids) == 0:
            return np.zeros(0, dtype=np.int64)
        q = np.frombuffer(query_bits.ljust(len(self.codes) * 8, b"\0"), dtype=np.uint64)
        n = len(self.ids)
        other = None  # the codes of other owners, when there are any
        if owner is not None:
            k = min(k, int(self._owner_counts[owner]))
            if k < n and self._owner_counts[owner] < n:
                other = self.owners != owner
        if k <= 0:
            return np.zeros(0, dtype=np.int64)
        if k >= n:
            return np.arange(n)
        # int32 for the selection: argpartition is faster on it than on uint16, and it picks
        # the same codes among equal distances as before the word-major layout. (Splitting the
        # scan between two threads made a search no faster on two cores: the search's other
        # signals need the second one.)
        dist = np.empty(n, dtype=np.int32)
        self._distances(q, dist)
        if other is not None:
            dist[other] = np.iinfo(np.int32).max
        return np.argpartition(dist, k - 1)[:k]

    def _distances(self, q: np.ndarray, dist: np.ndarray) -> None:
        """Hamming distances of the codes to ``q``, into ``dist``. A block of codes at a time,
        through buffers that stay in the CPU's cache: at 1M codes, whole-row temporaries made
        the scan ~1.5x slower (~30 ms against ~20 ms)."""
        assert self.codes is not None
        n = len(dist)
        size = min(n, HAMMING_BLOCK)
        xor = np.empty(size, dtype=np.uint64)
        ones = np.empty(size, dtype=np.uint8)
        acc = np.empty(size, dtype=np.uint16)  # at most dim bits differ
        for start in range(0, n, size):
            stop = min(n, start + size)
            x, o, a = xor[: stop - start], ones[: stop - start], acc[: stop - start]
            a[:] = 0
            for word, q_word in zip(self.codes, q, strict=True):
                np.bitwise_xor(word[start:stop], q_word, out=x)
                np.bitwise_count(x, out=o)
                a += o
            dist[start:stop] = a
