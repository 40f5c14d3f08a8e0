"""The `semantic` chunker: a new chunk where the meaning of the text turns."""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from ragexp.base.text import sentence_spans
from ragexp.types import Document
from ragexp.base.settings import Percentile, PositiveInt
from ragexp.components.chunkers.base import Chunker, pack


class SemanticChunker(Chunker):
    """Embeds each sentence and starts a new chunk where the cosine distance between
    neighbouring sentences exceeds the `breakpoint_percentile` of that document's distances.
    Chunks longer than `max_chunk_size` characters are cut at sentence boundaries."""

    def __init__(self, embedder, breakpoint_percentile: Percentile, max_chunk_size: PositiveInt):
        self.embedder = embedder
        self.breakpoint_percentile = breakpoint_percentile
        self.max_chunk_size = max_chunk_size

    def split(self, documents: Sequence[Document]) -> Iterable[list[tuple[int, int]]]:
        # one embedding call for every sentence of the corpus, then split document by document
        units = [sentence_spans(doc.text) for doc in documents]
        vectors = self.embedder.embed([doc.text[a:b] for doc, spans in zip(documents, units) for a, b in spans])
        offset = 0
        for spans in units:
            yield self.breakpoints(spans, vectors[offset : offset + len(spans)])
            offset += len(spans)

    def breakpoints(self, units: list[tuple[int, int]], vectors: np.ndarray) -> list[tuple[int, int]]:
        if len(units) < 3:
            groups = [units] if units else []
        else:
            distances = 1.0 - np.sum(vectors[:-1] * vectors[1:], axis=1)
            threshold = np.percentile(distances, self.breakpoint_percentile)
            groups, current = [], [units[0]]
            for unit, distance in zip(units[1:], distances):
                if distance > threshold:
                    groups.append(current)
                    current = []
                current.append(unit)
            groups.append(current)
        return [span for group in groups for span in pack(group, self.max_chunk_size, 0)]
