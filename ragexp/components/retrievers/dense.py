"""The `dense` retriever: the chunks' vectors in Qdrant (local mode or a server)."""
from __future__ import annotations

from typing import Sequence

from ragexp.types import Chunk, Hit
from ragexp.base.settings import PositiveInt
from ragexp.components.retrievers.base import Retriever
from ragexp.components.retrievers.bm25 import TIE_MARGIN
from ragexp.components.retrievers.ties import in_tie_order


class DenseRetriever(Retriever):
    """Cosine similarity in a Qdrant collection: qdrant-client's local in-memory mode by default,
    an on-disk folder with `path`, a Qdrant server with `url` (and `api_key_env` when it needs a
    key). The collection is named after its content unless `collection` names it, and is never
    deleted: see `ragexp.components.retrievers.qdrant` for the rules that make parallel jobs on one server safe."""

    def __init__(self, embedder, top_k: PositiveInt, url: str | None, api_key_env: str | None,
                 collection: str | None, path: str | None, batch_size: PositiveInt = 256):
        self.embedder = embedder
        self.top_k = top_k
        self.url, self.api_key_env, self.collection, self.path = url, api_key_env, collection, path
        self.batch_size = batch_size

    def index(self, chunks: Sequence[Chunk]) -> None:
        from ragexp.components.retrievers.qdrant import connect, content_hash, fill_collection

        self.chunks = list(chunks)
        vectors = self.embedder.embed([c.text for c in self.chunks])
        content = content_hash(self.chunks, self.embedder.key(), int(vectors.shape[1]))
        self.name = self.collection or f"ragexp_{content[:24]}"
        self._client = connect(self.url, self.path, self.api_key_env)
        fill_collection(self._client, self.name, vectors, content, bool(self.collection), self.batch_size)

    def search(self, queries: Sequence[str], depth: int | None = None) -> list[list[Hit]]:
        from ragexp.components.retrievers.qdrant import query

        vectors = self.embedder.embed(list(queries))
        limit = depth or self.top_k
        return [[Hit(chunk, score, rank) for rank, (chunk, score) in
                 enumerate(in_tie_order([(self.chunks[p.id], float(p.score)) for p in points], limit), 1)]
                for points in query(self._client, self.name, vectors, limit + TIE_MARGIN)]
