"""Embedders: texts -> L2-normalised vectors (so a dot product is the cosine similarity).

The vectors an embedder computes are kept in its run's `EmbeddingCache`, shared by every embedder
of that run, so the same sentence embedded by the chunker, retriever, generator and judge costs
one model call."""
from __future__ import annotations

import re
import threading
from collections import Counter
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Sequence

import numpy as np

from ragexp.base.progress import progress


_HASH_WORD = re.compile(r"\w+", re.UNICODE)


class EmbeddingCache:
    """One run's embedding state: the vectors computed so far (embedder key -> text -> vector), the
    on-disk `store` (a `ragexp.store.embedding_store.EmbeddingStore`, None for memory only) and `stats`: texts
    embedded by a model (`embedded_texts`), not served from memory or disk.

    How embedders get their run's cache: they are built deep inside other components' configs
    (the semantic chunker's, the dense retriever's, the judge's `embedder:` node), so the run
    cannot hand it to their constructors. `run()` builds its components inside
    `with embeddings.building():`; every embedder constructed in that block takes this cache
    (`Embedder.__new__` reads it from a context variable set only for the block). An embedder
    built anywhere else (a test, a notebook) gets a cache of its own. So nothing is kept per
    process: two runs in one process share neither vectors nor counts."""

    def __init__(self, store=None):
        self.store = store
        self.memo: dict[str, dict[str, np.ndarray]] = {}
        self.stats: Counter[str] = Counter(embedded_texts=0, index_embedded_texts=0)  # reported even when 0
        self.embedders: list[Embedder] = []  # those built in `building()`: the run connects the remote ones
        self._lock = threading.Lock()

    @classmethod
    def beside(cls, stage_cache) -> EmbeddingCache:
        """A run's embedding cache, with its vectors on disk beside `stage_cache` (a
        `ragexp.store.cache.StageCache`) when that is enabled, in memory only otherwise."""
        from ragexp.store.embedding_store import EmbeddingStore

        return cls(EmbeddingStore(stage_cache.dir) if stage_cache.enabled else None)

    @contextmanager
    def building(self) -> Iterator[EmbeddingCache]:
        """Embedders constructed inside this block use this cache."""
        token = _BUILDING.set(self)
        try:
            yield self
        finally:
            _BUILDING.reset(token)

    def count(self, texts: int) -> None:
        with self._lock:
            self.stats["embedded_texts"] += texts


_BUILDING: ContextVar[EmbeddingCache | None] = ContextVar("ragexp_embeddings_building", default=None)


class Embedder:
    name = "embedder"
    batch_size: int  # set by each subclass
    cache: EmbeddingCache  # the run's (see EmbeddingCache), set when the embedder is constructed

    def __new__(cls, *args, **kwargs):
        embedder = super().__new__(cls)
        embedder.cache = _BUILDING.get() or EmbeddingCache()
        embedder.cache.embedders.append(embedder)
        return embedder

    def key(self) -> str:
        """Identifies the vectors this embedder makes (model and endpoint)."""
        raise NotImplementedError

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of `texts`, one row each, as one read-only float32 matrix. The texts this
        call embeds (or reads from the on-disk store) are kept in the run's memo as views of that
        matrix's rows, so a corpus's vectors sit in memory once, not once in the memo and again in
        the matrix (at 10^6 chunks of 256-d: 1 GB, not 2; see docs/how-to/scale.md)."""
        if not texts:
            return np.zeros((0, self.dimension()), dtype=np.float32)
        key, store = self.key(), self.cache.store
        memo = self.cache.memo.setdefault(key, {})
        row: dict[str, int] = {}  # each distinct text -> its first row
        for i, text in enumerate(texts):
            row.setdefault(text, i)
        missing = [t for t in row if t not in memo]
        out: np.ndarray | None = None
        kept: list[str] = []  # texts whose memo entry becomes a row of `out`

        def place(batch: Sequence[str], vectors: np.ndarray) -> None:
            nonlocal out
            if out is None:
                out = np.empty((len(texts), vectors.shape[-1]), dtype=np.float32)
            out[[row[t] for t in batch]] = vectors
            kept.extend(batch)

        if missing and store is not None:
            for text, vector in store.stored(key, missing):  # copied into `out` as read: never all held twice
                if out is None:
                    place([text], vector)
                else:
                    out[row[text]] = vector
                    kept.append(text)
            if kept:
                found = set(kept)
                missing = [t for t in missing if t not in found]
        missing.sort(key=len, reverse=True)  # longest first: batches of similar length waste the least padding
        for start in progress(range(0, len(missing), self.batch_size), desc=f"embedding ({self.name})",
                              total=-(-len(missing) // self.batch_size)):
            batch = missing[start : start + self.batch_size]
            vectors = np.asarray(self.embed_batch(batch), dtype=np.float32)
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            place(batch, vectors)
            if store is not None:
                store.put(key, batch, vectors)
            self.cache.count(len(batch))
        if out is None:  # every text was in the memo already
            out = np.stack([memo[t] for t in texts])
        else:
            served = [t for t in row if t in memo]  # in the memo before this call
            if served:
                out[[row[t] for t in served]] = np.stack([memo[t] for t in served])
            first = np.fromiter((row[t] for t in texts), dtype=np.int64, count=len(texts))
            repeats = np.flatnonzero(first != np.arange(len(texts)))
            if len(repeats):
                out[repeats] = out[first[repeats]]
        out.flags.writeable = False  # its rows are the memo's vectors: a caller must not change them
        memo.update((t, out[row[t]]) for t in kept)
        return out

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def dimension(self) -> int:
        return int(self.embed(["dimension probe"]).shape[1])
