"""Test doubles for seams the engine defines (never for the engine itself)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from navi_desktop.memory.embedders import normalized
from navi_desktop.memory.textproc import tokens


class BagOfWordsEmbedder:
    """A real, deterministic embedder: the normalised sum of a fixed random vector per word,
    so texts sharing words are close. ``fail`` makes it behave like an unreachable server."""

    def __init__(self, model: str = "test/bow-64", dim: int = 64) -> None:
        self.model = model
        self.dim = dim
        self.calls = 0
        self.fail = False

    def _word(self, word: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(f"{self.model}:{word}".encode()).digest()[:8], "big")
        return np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)

    async def embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        self.calls += 1
        if self.fail:
            raise ConnectionError("embedding server unreachable")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in tokens(text):
                out[i] += self._word(word)
        return normalized(out)
