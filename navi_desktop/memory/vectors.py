"""Vector search: a 1-bit coarse scan held in memory, then exact cosine re-rank in SQLite.

Each embedding row stores the float32 vector (sqlite-vec's format) and its sign bits
(``vec_quantize_binary`` layout). Scanning 1-bit codes with numpy's popcount costs ~4 ms at
100k vectors for any candidate count, where sqlite-vec's own ``bit[]`` KNN grows with k
(~21 ms at k=100); the re-rank of the candidates runs ``vec_distance_cosine`` on the floats.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MEMORY, MESSAGE = 0, 1


def sign_bits(vectors: np.ndarray) -> np.ndarray:
    """Pack sign bits, least significant bit first, exactly as sqlite-vec's vec_quantize_binary."""
    return np.packbits(vectors > 0, axis=-1, bitorder="little")


@dataclass
class BitIndex:
    """In-memory copy of one model's sign bits; the database stays the source of truth."""

    model: str
    dim: int
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    owners: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    codes: np.ndarray | None = None  # (n, dim/64) uint64
    _pending: list[tuple[int, int, bytes]] = field(default_factory=list)
    _removed: set[int] = field(default_factory=set)

    def __len__(self) -> int:
        self._flush()
        return len(self.ids)

    @property
    def words(self) -> int:
        return (self.dim + 63) // 64

    def _as_words(self, raw: bytes) -> np.ndarray:
        buf = np.zeros(self.words * 8, dtype=np.uint8)
        buf[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        return buf.view(np.uint64)

    def add(self, embedding_id: int, owner: int, bits: bytes) -> None:
        # Appends are batched: rebuilding the arrays per insert would be quadratic.
        self._pending.append((embedding_id, owner, bits))

    def remove(self, embedding_ids: set[int]) -> None:
        if embedding_ids:
            self._removed |= embedding_ids

    def _flush(self) -> None:
        if self._pending:
            new_ids = np.fromiter((p[0] for p in self._pending), dtype=np.int64)
            new_owners = np.fromiter((p[1] for p in self._pending), dtype=np.int8)
            new_codes = np.stack([self._as_words(p[2]) for p in self._pending])
            self._pending.clear()
            self.ids = np.concatenate([self.ids, new_ids])
            self.owners = np.concatenate([self.owners, new_owners])
            self.codes = (
                new_codes if self.codes is None else np.concatenate([self.codes, new_codes])
            )
        if self._removed:
            keep = ~np.isin(self.ids, np.fromiter(self._removed, dtype=np.int64))
            self._removed.clear()
            self.ids, self.owners = self.ids[keep], self.owners[keep]
            if self.codes is not None:
                self.codes = self.codes[keep]

    def candidates(self, query_bits: bytes, k: int, owner: int | None = None) -> list[int]:
        """Embedding ids of the k codes nearest in Hamming distance (optionally one owner type)."""
        self._flush()
        if self.codes is None or len(self.ids) == 0:
            return []
        q = self._as_words(query_bits)
        dist = np.bitwise_count(self.codes ^ q).sum(axis=1, dtype=np.int32)
        if owner is not None:
            dist = np.where(self.owners == owner, dist, np.iinfo(np.int32).max)
            k = min(k, int((self.owners == owner).sum()))
        if k <= 0:
            return []
        top = np.argpartition(dist, k - 1)[:k] if k < len(dist) else np.arange(len(dist))
        return self.ids[top].tolist()
