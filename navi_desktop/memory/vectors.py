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

from navi_desktop.memory import hamming

MEMORY, MESSAGE = 0, 1
# The Hamming shortlist that the asymmetric score orders: 8x the candidates wanted, and at
# least this share of the index. It is Hamming that loses true neighbours as an index grows,
# not the asymmetric score: at 1M codes, a 10,000 shortlist ordered down to 1,000 candidates
# kept more of the exact top 10 (0.977) than 6,400 down to 1,600 (0.973), 100 queries.
ASYMMETRIC_SHORTLIST = 8
SHORTLIST_SHARE = 0.01


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


def cosines(
    query: np.ndarray, stored: list[bytes], fast: hamming.Kernels | None = None
) -> np.ndarray:
    """The cosine of the float ``query`` with each stored int8 copy (a code of the wrong
    length, which a damaged row could hold, gets -2: below any cosine). ``fast``: the
    compiled functions, for a large index (hamming.compiled)."""
    dim = len(query)
    out = np.full(len(stored), -2.0, dtype=np.float32)
    fine = [i for i, blob in enumerate(stored) if len(blob) == dim]
    if not fine:
        return out
    raw = b"".join(stored[i] for i in fine)
    codes = np.frombuffer(raw, dtype=np.int8).reshape(len(fine), dim)
    query = np.ascontiguousarray(query, dtype=np.float32)  # the type the kernel was built for
    if fast is not None:
        found = np.empty(len(fine), dtype=np.float32)
        fast.cosines(codes, query, found)
        out[fine] = found
        return out
    floats = codes.astype(np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", floats, floats)) * float(np.linalg.norm(query))
    norms[norms == 0] = 1.0
    # einsum, not a BLAS product: BLAS's threads would spin on the cores the other
    # signals use (see _set_bit_sums).
    out[fine] = np.einsum("ij,j->i", floats, query) / norms
    return out


# Each byte value's bits, least significant first: (256, 8).
_BYTE_BITS = np.unpackbits(
    np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little"
).astype(np.float32)


def _bit_sum_table(query: np.ndarray, width: int) -> np.ndarray:
    """The query's partial sum for every byte value at every byte position: (width * 256,)."""
    padded = np.zeros(width * 8, dtype=np.float32)
    padded[: len(query)] = query
    return np.einsum("vi,bi->bv", _BYTE_BITS, padded.reshape(width, 8)).ravel()


def _set_bit_sums(codes: np.ndarray, query: np.ndarray) -> np.ndarray:
    """For each code (a row of bytes), the sum of the query's values where the code's bit is
    set: (q·sign + Σq) / 2, so the same order as q·sign.

    Read from a table of every byte value's partial sum at every byte position, not by
    unpacking the bits into a matrix product: BLAS was slower here, and its worker threads
    spun on the cores the search's other signals were using."""
    width = codes.shape[1]
    offsets = np.arange(width, dtype=np.intp) * 256
    return np.take(_bit_sum_table(query, width), codes + offsets).sum(axis=1)


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
    # Codes added since the arrays were last built, by id; ids to drop from the arrays.
    _pending: dict[int, tuple[int, bytes]] = field(default_factory=dict)
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
        self._pending[embedding_id] = (owner, bits)

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
        """Drop these ids' codes, at a cost in proportion to their number, not the index's
        (the embedding pass removes and adds a batch at a time): a code added since the
        arrays were built goes now, the arrays' own when they are next built (_flush). An
        id added again after (SQLite gives a new row the id of a deleted highest one) keeps
        its new code: _flush drops before it appends."""
        for embedding_id in embedding_ids:
            self._pending.pop(embedding_id, None)
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
        """Removals, then the codes added since: a removal is of the arrays' codes only
        (remove() dropped at once the codes added before it)."""
        if self._removed:
            keep = ~np.isin(self.ids, np.fromiter(self._removed, dtype=np.int64))
            self._removed.clear()
            self.ids, self.owners = self.ids[keep], self.owners[keep]
            if self.codes is not None:
                self.codes = self.codes[:, keep]
        if self._pending:
            pending, self._pending = self._pending, {}
            self._append(
                np.fromiter(pending, dtype=np.int64, count=len(pending)),
                np.fromiter((p[0] for p in pending.values()), dtype=np.int8, count=len(pending)),
                self._as_words([p[1] for p in pending.values()]),
            )

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
        self,
        query_bits: bytes,
        k: int,
        owner: int | None = None,
        query: np.ndarray | None = None,
        scanned: Scanned | None = None,
    ) -> list[int]:
        """Embedding ids of the k codes nearest the query (optionally one owner type).

        Hamming distance between sign codes picks a shortlist; with the float ``query``, the
        shortlist is re-scored by the dot product of the query with each code's signs
        (asymmetric distance: only the stored side is quantised), which orders candidates
        far better than Hamming, so fewer full vectors need reading for the exact re-rank.
        ``scanned``: the query's distances, when scanned already (vector_search._scanned).
        """
        if query is not None:
            wanted = max(ASYMMETRIC_SHORTLIST * k, int(SHORTLIST_SHARE * len(self.ids)))
            shortlist = self._hamming(query_bits, wanted, owner, scanned)
            if len(shortlist) < wanted:  # a small index: re-rank it all
                return self.ids[shortlist].tolist()
            best = np.argpartition(-self._shortlist_sums(shortlist, query), k - 1)[:k]
            return self.ids[shortlist[best]].tolist()
        return self.ids[self._hamming(query_bits, k, owner, scanned)].tolist()

    def _shortlist_sums(self, shortlist: np.ndarray, query: np.ndarray) -> np.ndarray:
        """_set_bit_sums of the codes at ``shortlist`` (compiled when the scan is)."""
        assert self.codes is not None
        compiled = hamming.compiled(len(self.ids))
        if compiled is None:
            return _set_bit_sums(self.codes[:, shortlist].T.copy().view(np.uint8), query)
        out = np.empty(len(shortlist), dtype=np.float32)
        compiled.sums(self.codes, shortlist, _bit_sum_table(query, len(self.codes) * 8), out)
        return out

    @cached_property
    def _owner_counts(self) -> np.ndarray:
        return np.bincount(self.owners, minlength=2)

    def _hamming(
        self, query_bits: bytes, k: int, owner: int | None, scanned: Scanned | None = None
    ) -> np.ndarray:
        """Positions of the k codes nearest in Hamming distance, nearest first (hamming.py)."""
        if self.codes is None or len(self.ids) == 0:
            return np.zeros(0, dtype=np.int64)
        n = len(self.ids)
        mixed = self._mixed(owner)
        if owner is not None:
            k = min(k, int(self._owner_counts[owner]))
        if k <= 0:
            return np.zeros(0, dtype=np.int64)
        if k >= n:
            return np.arange(n)
        if scanned is None:  # a small index: scanned here, on this thread
            scanned = self.scan(query_bits, owner)
        dist = scanned.dist
        if mixed and scanned.owner != owner:  # scanned for every owner: mark the others
            dist = np.where(self.owners == owner, dist, hamming.EXCLUDED)
        return hamming.nearest(dist, k)

    def scan(self, query_bits: bytes, owner: int | None) -> Scanned:
        """The query's distances to every code, on this thread (see scan_part)."""
        assert self.codes is not None
        q, mine = self.query_words(query_bits), owner if self._mixed(owner) else None
        return Scanned(hamming.distances(self.codes, q, self.owners, mine), owner)

    def _mixed(self, owner: int | None) -> bool:
        """Whether some codes are another owner's than ``owner``."""
        return owner is not None and int(self._owner_counts[owner]) < len(self.ids)

    def query_words(self, query_bits: bytes) -> np.ndarray:
        """The query's sign bits as the codes' 64-bit words."""
        assert self.codes is not None
        return np.frombuffer(query_bits.ljust(len(self.codes) * 8, b"\0"), dtype=np.uint64)

    def scan_part(self, query: np.ndarray, owner: int | None, dist: np.ndarray, part: Part) -> None:
        """scan() of the codes in ``part`` only, into ``dist``: parts can be scanned on
        several threads at once (vector_search._scanned)."""
        assert self.codes is not None
        owner = owner if self._mixed(owner) else None
        hamming.scan_part(self.codes, query, self.owners, owner, dist, *part)


Part = tuple[int, int]  # (start, stop) of codes


@dataclass(frozen=True)
class Scanned:
    """A query's Hamming distance to every code (Codes.scan_part, part by part), with other
    owners' codes EXCLUDED when ``owner`` is set."""

    dist: np.ndarray
    owner: int | None
