"""`retriever=qdrant_collection`: search a Qdrant collection a team already has, read-only, with
ragexp's questions (connection and queries: ragexp.components.retrievers.qdrant)."""
from __future__ import annotations

from typing import Sequence

from ragexp.components.retrievers.qdrant import connect, query, vector_params
from ragexp.components.retrievers import TIE_MARGIN, Retriever, in_tie_order
from ragexp.errors import RagexpError
from ragexp.types import Chunk, Hit
from ragexp.base.settings import PositiveInt


class QdrantCollectionRetriever(Retriever):
    """Searches an existing Qdrant collection, read-only (`retriever=qdrant_collection`): a team's
    own index, evaluated on ragexp's questions. The pipeline's chunks are not indexed; each hit is
    the point's payload: its text (`text_field`) and document id (`doc_id_field`, what the golden
    documents name), its chunk id the point id or `chunk_id_field`. `embedder` must be the model
    that made the collection's vectors (`vector_name` for a collection of named vectors). Hits are
    never served from the stage cache (`cacheable`): the collection may change between runs."""

    cacheable = False

    def __init__(self, embedder, collection: str | None, url: str | None, path: str | None,
                 api_key_env: str | None, text_field: str, doc_id_field: str,
                 chunk_id_field: str | None, vector_name: str | None, top_k: PositiveInt):
        self.embedder, self.collection = embedder, collection
        self.url, self.path, self.api_key_env = url, path, api_key_env
        self.text_field, self.doc_id_field, self.chunk_id_field = text_field, doc_id_field, chunk_id_field
        self.vector_name, self.top_k = vector_name, top_k

    def index(self, chunks: Sequence[Chunk]) -> None:
        """Checks the collection (it exists, its vectors fit the embedder, its points have the
        payload fields); indexes nothing. (Checked here, not by the config's validation, so that the
        shipped option, which cannot name your collection, composes.)"""
        if not self.collection:
            raise RagexpError("retriever.collection: name the Qdrant collection to search (retriever.collection=NAME)")
        if not self.url and not self.path:
            raise RagexpError("retriever.url: give the Qdrant server (retriever.url=http://host:6333) or an on-disk "
                              "folder (retriever.path=DIR) that holds the collection")
        self._client = connect(self.url, self.path, self.api_key_env)
        name = str(self.collection)
        where = f"collection {name!r}"
        if not self._client.collection_exists(name):
            raise RagexpError(f"retriever.collection: no {where} at {self.url or self.path}")
        params = vector_params(self._client.get_collection(name), self.vector_name)
        if params is None:
            raise RagexpError(f"retriever.vector_name: {where} has no vectors named {self.vector_name!r}")
        size = self.embedder.dimension()
        if params[0] != size:
            raise RagexpError(f"retriever.embedder: {where} holds {params[0]}-d vectors, embedder {self.embedder.name!r} "
                              f"makes {size}-d ones; choose the embedder that made the collection")
        points, _ = self._client.scroll(name, limit=20, with_payload=True, with_vectors=False)
        if not points:
            raise RagexpError(f"retriever.collection: {where} is empty")
        for setting in ("text_field", "doc_id_field", "chunk_id_field"):
            field = getattr(self, setting)
            missing = [p.id for p in points if field is not None and field not in (p.payload or {})]
            if missing:
                fields = sorted({k for p in points for k in (p.payload or {})})
                raise RagexpError(f"retriever.{setting}: the points of {where} have no payload field {field!r} "
                                  f"(point {missing[0]}; fields: {', '.join(fields) or 'none'})")

    def chunk(self, point) -> Chunk:
        payload = point.payload or {}
        text, doc_id = payload.get(self.text_field), payload.get(self.doc_id_field)
        if not isinstance(text, str) or doc_id is None:
            raise RagexpError(f"retriever.text_field: point {point.id} of collection {self.collection!r} has no "
                              f"{self.text_field!r} text or no {self.doc_id_field!r}")
        chunk_id = payload.get(self.chunk_id_field) if self.chunk_id_field else point.id
        return Chunk(str(chunk_id), str(doc_id), text)

    def search(self, queries: Sequence[str], depth: int | None = None) -> list[list[Hit]]:
        vectors = self.embedder.embed(list(queries))
        limit = depth or self.top_k
        responses = query(self._client, str(self.collection), vectors, limit + TIE_MARGIN, self.vector_name, True)
        return [[Hit(chunk, score, rank) for rank, (chunk, score) in
                 enumerate(in_tie_order([(self.chunk(p), float(p.score)) for p in points], limit), 1)]
                for points in responses]
