"""Retrievers: `index(chunks)` once, then `search(queries)` -> the top_k hits of each query."""
from __future__ import annotations

from typing import Sequence

from ragexp.types import Chunk, Hit


class Retriever:
    top_k: int
    cacheable = True  # its hits depend only on its settings and the chunks: the stage cache may keep them

    def index(self, chunks: Sequence[Chunk]) -> None:
        raise NotImplementedError

    def search(self, queries: Sequence[str], depth: int | None = None) -> list[list[Hit]]:
        """The best `depth` (default `top_k`) hits of each query, best first."""
        raise NotImplementedError
