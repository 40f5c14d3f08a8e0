"""Qdrant without losses: connecting (in-memory, an on-disk folder, a server) and collections that
ragexp fills only when they are its own (for `retriever=dense`); `retriever=qdrant_collection`
(ragexp.components.retrievers.qdrant_collection) searches a collection a team already has, read-only.

Rules for the collections `retriever=dense` writes (see docs/how-to/scale.md):
- a collection is named after its content (`ragexp_` + a hash of the chunks, the embedder and
  the vector size) unless `retriever.collection` names it; every point carries that hash in its
  payload (`ragexp`), its id is the chunk's position;
- ragexp never deletes a collection. An absent one is created; an existing one is used only when
  its vectors fit and its points carry the same hash, else the run stops with one line naming
  `retriever.collection`; it is filled (upserts of the same points, idempotent) when it has fewer
  points than chunks, so two jobs that index the same content at once write the same points and
  neither loses the other's collection;
- content-named collections stay on the server for the next run with the same content, like the
  stage cache; remove `ragexp_*` collections yourself when no job uses them."""
from __future__ import annotations

import hashlib
import logging
import threading
from typing import Any, Sequence

import numpy as np

from ragexp.errors import RagexpError
from ragexp.base.progress import progress
from ragexp.types import Chunk

log = logging.getLogger(__name__)

MARK = "ragexp"  # the payload field with the content hash of the points ragexp wrote
_FOLDERS: dict[str, Any] = {}  # qdrant-client locks an on-disk folder: one client per folder per process
_FOLDERS_LOCK = threading.Lock()


def connect(url: str | None, path: str | None, api_key_env: str | None, setting: str = "retriever"):
    """A qdrant-client: a server at `url`, an on-disk folder `path` (shared by the process's
    retrievers), or, with neither, a new in-memory store."""
    from qdrant_client import QdrantClient

    if path and not url:
        with _FOLDERS_LOCK:
            if path not in _FOLDERS:
                try:
                    _FOLDERS[path] = QdrantClient(path=path)
                except RuntimeError as err:  # another process holds the folder
                    raise RagexpError(f"{setting}.path: {err}") from None
            return _FOLDERS[path]
    if not url:
        return QdrantClient(location=":memory:")
    from ragexp.components.embedders import api_key

    key = api_key(api_key_env, f"{setting}.api_key_env") if api_key_env else None
    client = QdrantClient(url=url, api_key=key)
    try:
        client.get_collections()
    except Exception as err:
        from ragexp.base.redact import scrub_url

        raise RagexpError(scrub_url(f"{setting}.url: cannot reach the Qdrant server at {url} ({err})")) from None
    return client


def content_hash(chunks: Sequence[Chunk], embedder_key: str, size: int) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk.chunk_id.encode() + b"\0" + chunk.text.encode() + b"\0")
    digest.update(f"{embedder_key}\0{size}".encode())
    return digest.hexdigest()


def vector_params(info, vector_name: str | None):
    """The (size, distance) of a collection's vectors (`vector_name` for named vectors), or None."""
    vectors = info.config.params.vectors
    if isinstance(vectors, dict):
        vectors = vectors.get(vector_name or "")
    elif vector_name:
        return None
    return None if vectors is None else (vectors.size, vectors.distance)


def fill_collection(client, name: str, vectors: np.ndarray, content: str, named_by_user: bool,
                    batch_size: int = 256) -> bool:
    """Makes collection `name` hold `vectors` (ids 0..n-1, payload {MARK: content}) without ever
    deleting anything; True when it already held them (nothing written)."""
    from qdrant_client import models

    setting = "retriever.collection"
    size = int(vectors.shape[1])
    if not client.collection_exists(name):
        try:
            client.create_collection(name, vectors_config=models.VectorParams(size=size, distance=models.Distance.COSINE))
        except Exception:  # created by another job since: checked below like any existing collection
            if not client.collection_exists(name):
                raise
    params = vector_params(client.get_collection(name), None)
    if params != (size, models.Distance.COSINE):
        raise RagexpError(f"{setting}: collection {name!r} exists with other vectors ({params}, not {size}-d cosine); "
                          "ragexp never deletes a collection: name another one"
                          + ("" if not named_by_user else " or set retriever.collection=null (a name per content)"))
    points, _ = client.scroll(name, limit=1, with_payload=True, with_vectors=False)
    if points and (points[0].payload or {}).get(MARK) != content:
        raise RagexpError(f"{setting}: collection {name!r} holds other points (not ragexp's for these chunks and this "
                          "embedder); ragexp never deletes a collection: set retriever.collection=null (a name per "
                          "content) or name a new one")
    count = client.count(name, exact=True).count
    if count == len(vectors):
        log.info("qdrant: collection %s already holds these %d chunks", name, count)
        return True
    if count > len(vectors):
        raise RagexpError(f"{setting}: collection {name!r} holds {count} points, more than the {len(vectors)} chunks "
                          "it should hold; name another collection")
    payload = {MARK: content}
    for start in progress(range(0, len(vectors), batch_size), desc="indexing (qdrant)",
                          total=-(-len(vectors) // batch_size)):
        end = min(start + batch_size, len(vectors))
        client.upsert(name, points=models.Batch(ids=list(range(start, end)), vectors=vectors[start:end].tolist(),
                                                payloads=[payload] * (end - start)))
    return False


def query(client, name: str, vectors: np.ndarray, limit: int, using: str | None = None, with_payload: bool = False):
    """The best `limit` points of each query vector, in batches of 64 requests."""
    from qdrant_client import models

    responses = []
    for start in progress(range(0, len(vectors), 64), desc="retrieving (qdrant)", total=-(-len(vectors) // 64)):
        requests = [models.QueryRequest(query=v.tolist(), limit=limit, using=using, with_payload=with_payload)
                    for v in vectors[start : start + 64]]
        responses += [r.points for r in client.query_batch_points(name, requests=requests)]
    return responses
