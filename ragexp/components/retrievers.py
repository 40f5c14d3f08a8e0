"""Retrievers: `index(chunks)` once, then `search(queries)` -> the top_k hits of each query."""
from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from ragexp.errors import RagexpError
from ragexp.progress import progress
from ragexp.text import words
from ragexp.types import Chunk, Hit
from ragexp.validation import Fraction, NonNegativeFloat, NonNegativeInt, PositiveInt


class Retriever:
    top_k: int

    def index(self, chunks: Sequence[Chunk]) -> None:
        raise NotImplementedError

    def search(self, queries: Sequence[str], depth: int | None = None) -> list[list[Hit]]:
        """The best `depth` (default `top_k`) hits of each query, best first."""
        raise NotImplementedError


class DenseRetriever(Retriever):
    """Cosine similarity in a Qdrant collection: qdrant-client's local in-memory mode by
    default, a Qdrant server with `url` (and `api_key_env` when it needs a key)."""

    def __init__(self, embedder, top_k: PositiveInt = 5, url: str | None = None, api_key_env: str | None = None,
                 collection: str | None = None, batch_size: PositiveInt = 256):
        self.embedder = embedder
        self.top_k = top_k
        self.url, self.api_key_env, self.collection = url, api_key_env, collection
        self.batch_size = batch_size

    def client(self):
        from qdrant_client import QdrantClient

        if not self.url:
            return QdrantClient(location=":memory:")
        from ragexp.components.embedders import api_key

        key = api_key(self.api_key_env, "retriever.api_key_env") if self.api_key_env else None
        client = QdrantClient(url=self.url, api_key=key)
        try:
            client.get_collections()
        except Exception as err:
            from ragexp.secrets import scrub_url

            raise RagexpError(scrub_url(f"retriever.url: cannot reach the Qdrant server at {self.url} ({err})")) from None
        return client

    def index(self, chunks: Sequence[Chunk]) -> None:
        from qdrant_client import models

        self.chunks = list(chunks)
        vectors = self.embedder.embed([c.text for c in self.chunks])
        content = hashlib.sha256("\0".join(c.chunk_id + c.text for c in self.chunks).encode())
        content.update(self.embedder.key().encode())
        self.name = self.collection or f"ragexp_{content.hexdigest()[:16]}"
        self._client = self.client()
        if self._client.collection_exists(self.name):
            self._client.delete_collection(self.name)
        self._client.create_collection(
            self.name, vectors_config=models.VectorParams(size=vectors.shape[1], distance=models.Distance.COSINE)
        )
        for start in progress(range(0, len(vectors), self.batch_size), desc="indexing (qdrant)",
                              total=-(-len(vectors) // self.batch_size)):
            end = min(start + self.batch_size, len(vectors))
            self._client.upsert(self.name, points=models.Batch(ids=list(range(start, end)), vectors=vectors[start:end].tolist()))

    def search(self, queries: Sequence[str], depth: int | None = None) -> list[list[Hit]]:
        from qdrant_client import models

        limit = depth or self.top_k
        vectors = self.embedder.embed(list(queries))
        results = []
        for start in progress(range(0, len(vectors), 64), desc="retrieving (dense)", total=-(-len(vectors) // 64)):
            requests = [models.QueryRequest(query=v.tolist(), limit=limit) for v in vectors[start : start + 64]]
            for response in self._client.query_batch_points(self.name, requests=requests):
                results.append([Hit(self.chunks[p.id], float(p.score), rank) for rank, p in enumerate(response.points, 1)])
        return results


class BM25Retriever(Retriever):
    """Okapi BM25 (rank-bm25) over lower-cased word tokens without stop words."""

    def __init__(self, top_k: PositiveInt = 5, k1: NonNegativeFloat = 1.5, b: Fraction = 0.75):
        self.top_k = top_k
        self.k1, self.b = k1, b

    def index(self, chunks: Sequence[Chunk]) -> None:
        from rank_bm25 import BM25Okapi

        self.chunks = list(chunks)
        self._bm25 = BM25Okapi([words(c.text) or ["\0"] for c in self.chunks], k1=self.k1, b=self.b)

    def search(self, queries: Sequence[str], depth: int | None = None) -> list[list[Hit]]:
        limit = min(depth or self.top_k, len(self.chunks))
        results = []
        for query in progress(queries, desc="retrieving (bm25)"):
            scores = self._bm25.get_scores(words(query))
            best = np.argsort(-scores, kind="stable")[:limit]
            results.append([Hit(self.chunks[i], float(scores[i]), rank) for rank, i in enumerate(best, 1)])
        return results


class HybridRetriever(Retriever):
    """Weighted reciprocal rank fusion of any retrievers: score(chunk) = sum over the retrievers of
    weight / (k + rank), over each retriever's best `depth` hits. `retrievers` maps a name to a
    configured retriever (conf/retriever/hybrid.yaml fuses `dense` and `bm25`); `weights` maps the
    same names to weights >= 0 (a retriever without a weight gets 1 / number of retrievers)."""

    def __init__(self, retrievers: dict[str, Retriever], top_k: PositiveInt = 5, k: NonNegativeInt = 60,
                 weights: dict[str, NonNegativeFloat] | None = None, depth: PositiveInt = 50):
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
            best = sorted(fused.items(), key=lambda item: -item[1])[: depth or self.top_k]
            results.append([Hit(self.chunks[cid], score, rank) for rank, (cid, score) in enumerate(best, 1)])
        return results
