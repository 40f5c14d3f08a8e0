"""The `hybrid` retriever: dense and BM25 rankings fused."""
from __future__ import annotations

from typing import Sequence

from ragexp.types import Chunk, Hit
from ragexp.base.settings import NonNegativeFloat, NonNegativeInt, PositiveInt
from ragexp.components.retrievers.base import Retriever
from ragexp.components.retrievers.ties import in_tie_order


class HybridRetriever(Retriever):
    """Weighted reciprocal rank fusion of any retrievers: score(chunk) = sum over the retrievers of
    weight / (k + rank), over each retriever's best `depth` hits. `retrievers` maps a name to a
    configured retriever (conf/retriever/hybrid.yaml fuses `dense` and `bm25`); `weights` maps the
    same names to weights >= 0 (a retriever without a weight gets 1 / number of retrievers)."""

    def __init__(self, retrievers: dict[str, Retriever], top_k: PositiveInt, k: NonNegativeInt,
                 weights: dict[str, NonNegativeFloat] | None, depth: PositiveInt):
        self.retrievers = dict(retrievers)
        self.top_k = top_k
        self.k, self.depth = k, depth
        given = {str(name): float(w) for name, w in (weights or {}).items()}
        self.weights = {name: given.get(name, 1.0 / len(self.retrievers)) for name in self.retrievers}

    @classmethod
    def constraints(cls, retrievers: dict, weights: dict | None = None, **_) -> list[str]:
        """Cross-field checks of the settings, run by ragexp.validation before any work."""
        if not retrievers:
            return ["retrievers: name at least one retriever to fuse"]
        unknown = sorted(set(weights or {}) - set(retrievers))
        return [f"weights.{name}: no retriever {name!r} in retrievers ({', '.join(retrievers)})" for name in unknown]

    @property
    def cacheable(self) -> bool:  # type: ignore[override]
        return all(r.cacheable for r in self.retrievers.values())

    def index(self, chunks: Sequence[Chunk]) -> None:
        self.chunks = {c.chunk_id: c for c in chunks}
        for retriever in self.retrievers.values():
            retriever.index(chunks)

    def search(self, queries: Sequence[str], depth: int | None = None) -> list[list[Hit]]:
        ranked = {name: r.search(queries, max(self.depth, depth or self.top_k)) for name, r in self.retrievers.items()}
        results = []
        for i in range(len(queries)):
            fused: dict[str, float] = {}
            for name, hits in ranked.items():
                for hit in hits[i]:
                    fused[hit.chunk.chunk_id] = fused.get(hit.chunk.chunk_id, 0.0) + self.weights[name] / (self.k + hit.rank)
            best = in_tie_order([(self.chunks[cid], score) for cid, score in fused.items()], depth or self.top_k)
            results.append([Hit(chunk, score, rank) for rank, (chunk, score) in enumerate(best, 1)])
        return results
