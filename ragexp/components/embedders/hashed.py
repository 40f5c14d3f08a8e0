"""The `hash` embedder: model-free vectors of hashed words, for tests and cheap sweeps."""
from __future__ import annotations

import numpy as np

from ragexp.base.settings import PositiveInt
from ragexp.components.embedders.base import Embedder, _HASH_WORD


class HashEmbedder(Embedder):
    """Deterministic vectors without a model (`embedder=hash`): each lower-cased word and each
    character trigram of a word is hashed (BLAKE2b) to one of `dimension` coordinates with a sign,
    and the counts are L2-normalised. Texts that share words get a high cosine; nothing is learned,
    so synonyms do not. For smoke tests and wide sweeps where model time dominates; its scores are
    not comparable with a neural embedder's."""

    def __init__(self, dimension: PositiveInt, name: str, batch_size: PositiveInt):
        self.dimension_ = dimension
        self.name, self.batch_size = name, batch_size

    def key(self) -> str:
        return f"hash:v1:{self.dimension_}"

    def dimension(self) -> int:
        return self.dimension_

    def features(self, text: str) -> list[str]:
        tokens = [w for w in _HASH_WORD.findall(text.lower())]
        grams = [f"#{w[i:i + 3]}" for w in tokens if len(w) > 3 for i in range(len(w) - 2)]
        return tokens + grams

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        import hashlib

        vectors = np.zeros((len(texts), self.dimension_), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature in self.features(text):
                digest = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
                vectors[row, digest % self.dimension_] += 1.0 if (digest >> 63) else -1.0
            if not vectors[row].any():  # no word at all: a fixed direction rather than a zero vector
                vectors[row, 0] = 1.0
        return vectors
