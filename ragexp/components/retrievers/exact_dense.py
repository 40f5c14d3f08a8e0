"""`retriever=dense_exact`: exact cosine search over the chunk vectors held as one float32 matrix
(no Qdrant): queries are scored in blocks by a matrix product and each query's best hits picked
with `np.argpartition`, so 1,000 queries over 10^6 chunks take seconds, not hours as in Qdrant's
local mode (which scores every vector per query and keeps each point as Python objects).

Memory: the matrix is the embedder's own output (the run's memo keeps views of its rows, not a
second copy), n x d x 4 bytes (10^6 chunks of 256-d: 1.0 GB; 384-d: 1.5 GB), plus one block of
scores, `block_mb`. Beyond one machine's memory use a Qdrant server (`retriever=dense
retriever.url=...`, an HNSW index): see docs/how-to/scale.md."""
from __future__ import annotations

from typing import Sequence

from ragexp.components.retrievers import Retriever, best_first, id_ranks
from ragexp.errors import RagexpError
from ragexp.base.progress import progress
from ragexp.types import Chunk, Hit
from ragexp.base.settings import PositiveInt


class ExactDenseRetriever(Retriever):
    """Cosine similarity by brute force over the chunk vectors in memory: the same ranking as
    `retriever=dense` (the embedder's vectors are L2-normalised, so a dot product is the cosine),
    equal scores (to `TIE_DIGITS`) in chunk id order. `block_mb` bounds the score matrix of one block of queries
    (queries per block = block_mb MB / (4 bytes x chunks), at least one)."""

    def __init__(self, embedder, top_k: PositiveInt, block_mb: PositiveInt):
        self.embedder = embedder
        self.top_k = top_k
        self.block_mb = block_mb

    def index(self, chunks: Sequence[Chunk]) -> None:
        if not chunks:
            raise RagexpError("retriever: no chunks to index (the corpus is empty, or the chunker made no chunks); "
                              "check dataset.path and the chunker's settings")
        self.chunks = list(chunks)
        self.ranks = id_ranks(self.chunks)
        self.vectors = self.embedder.embed([c.text for c in self.chunks])  # read-only, shared with the memo

    def block_rows(self) -> int:
        """Queries scored per matrix product."""
        return max(1, self.block_mb * 2**20 // (4 * len(self.chunks)))

    def search(self, queries: Sequence[str], depth: int | None = None) -> list[list[Hit]]:
        limit = min(depth or self.top_k, len(self.chunks))
        query_vectors = self.embedder.embed(list(queries))
        rows = self.block_rows()
        results: list[list[Hit]] = []
        for start in progress(range(0, len(query_vectors), rows), desc="retrieving (dense, exact)",
                              total=-(-len(query_vectors) // rows)):
            scores = query_vectors[start : start + rows] @ self.vectors.T
            for row in scores:
                best = best_first(row, limit, self.ranks)
                results.append([Hit(self.chunks[i], float(row[i]), rank) for rank, i in enumerate(best, 1)])
            del scores, row  # freed before the next block is computed: one block of scores in memory, not two
        return results
