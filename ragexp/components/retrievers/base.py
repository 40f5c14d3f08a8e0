"""Retrievers: `index(chunks)` once, then `search(queries)` -> the top_k hits of each query."""
from __future__ import annotations

from array import array
from typing import Literal, Sequence

import numpy as np

from ragexp.base.progress import progress
from ragexp.base.text import words
from ragexp.types import Chunk, Hit
from ragexp.base.settings import Fraction, NonNegativeFloat, NonNegativeInt, PositiveInt


class Retriever:
    top_k: int
    cacheable = True  # its hits depend only on its settings and the chunks: the stage cache may keep them

    def index(self, chunks: Sequence[Chunk]) -> None:
        raise NotImplementedError

    def search(self, queries: Sequence[str], depth: int | None = None) -> list[list[Hit]]:
        """The best `depth` (default `top_k`) hits of each query, best first."""
        raise NotImplementedError


class DenseRetriever(Retriever):
    """Cosine similarity in a Qdrant collection: qdrant-client's local in-memory mode by default,
    an on-disk folder with `path`, a Qdrant server with `url` (and `api_key_env` when it needs a
    key). The collection is named after its content unless `collection` names it, and is never
    deleted: see `ragexp.components.qdrant` for the rules that make parallel jobs on one server safe."""

    def __init__(self, embedder, top_k: PositiveInt = 5, url: str | None = None, api_key_env: str | None = None,
                 collection: str | None = None, batch_size: PositiveInt = 256, path: str | None = None):
        self.embedder = embedder
        self.top_k = top_k
        self.url, self.api_key_env, self.collection, self.path = url, api_key_env, collection, path
        self.batch_size = batch_size

    def index(self, chunks: Sequence[Chunk]) -> None:
        from ragexp.components.qdrant import connect, content_hash, fill_collection

        self.chunks = list(chunks)
        vectors = self.embedder.embed([c.text for c in self.chunks])
        content = content_hash(self.chunks, self.embedder.key(), int(vectors.shape[1]))
        self.name = self.collection or f"ragexp_{content[:24]}"
        self._client = connect(self.url, self.path, self.api_key_env)
        fill_collection(self._client, self.name, vectors, content, bool(self.collection), self.batch_size)

    def search(self, queries: Sequence[str], depth: int | None = None) -> list[list[Hit]]:
        from ragexp.components.qdrant import query

        vectors = self.embedder.embed(list(queries))
        limit = depth or self.top_k
        return [[Hit(chunk, score, rank) for rank, (chunk, score) in
                 enumerate(in_tie_order([(self.chunks[p.id], float(p.score)) for p in points], limit), 1)]
                for points in query(self._client, self.name, vectors, limit + TIE_MARGIN)]


# Qdrant breaks ties its own way: it is asked for this many more points, put in tie order, then cut
TIE_MARGIN = 16
BM25Impl = Literal["bm25s", "rank_bm25"]


class BM25Retriever(Retriever):
    """Okapi BM25 over lower-cased word tokens without stop words (`ragexp.base.text.words`), scored
    by bm25s (`impl: bm25s`: a sparse matrix of precomputed term scores, so a query costs the
    postings of its terms) or by rank-bm25 (`impl: rank_bm25`: a Python loop over every chunk for
    every query term). Both compute rank-bm25's formula, idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b
    + b * len / avglen)) with idf(t) = log((N - df + 0.5) / (df + 0.5)); they differ only where that
    idf is negative (a term in more than half of the chunks): rank-bm25 floors it at 0.25 x the
    mean idf, bm25s at 0. Ties are ordered by chunk id in both (see `best_first`)."""

    def __init__(self, top_k: PositiveInt = 5, k1: NonNegativeFloat = 1.5, b: Fraction = 0.75,
                 impl: BM25Impl = "bm25s"):
        self.top_k = top_k
        self.k1, self.b = k1, b
        self.impl = impl

    def index(self, chunks: Sequence[Chunk]) -> None:
        self.chunks = list(chunks)
        self.ranks = id_ranks(self.chunks)
        if self.impl == "rank_bm25":
            from rank_bm25 import BM25Okapi

            self._bm25 = BM25Okapi([words(c.text) or ["\0"] for c in progress(self.chunks, desc="tokenising")],
                                   k1=self.k1, b=self.b)
            return
        import bm25s

        # token ids straight into C arrays: 10^6 chunks' tokens as Python strings would take gigabytes
        vocab: dict[str, int] = {}
        ids, lengths = array("i"), array("i")
        for chunk in progress(self.chunks, desc="tokenising"):
            tokens = words(chunk.text) or ["\0"]
            lengths.append(len(tokens))
            ids.extend([vocab.setdefault(t, len(vocab)) for t in tokens])
        # atire's term-frequency part is rank-bm25's (with the k1 + 1 factor); robertson's idf is its log
        self._model = bm25s.BM25(k1=self.k1, b=self.b, method="atire", idf_method="robertson")
        self._model.scores = bm25_postings(np.frombuffer(ids, dtype=np.int32), np.frombuffer(lengths, dtype=np.int32),
                                           len(vocab), self.k1, self.b)
        self._model.vocab_dict, self._model.nonoccurrence_array = vocab, None

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every chunk for `query` (0 where no query term occurs); a repeated
        query term counts again, as in rank-bm25."""
        terms = words(query)
        if self.impl == "rank_bm25":
            return self._bm25.get_scores(terms)
        ids = self._model.get_tokens_ids(terms)  # terms the chunks never use are dropped
        return self._model.get_scores_from_ids(ids) if ids else np.zeros(len(self.chunks), dtype=np.float32)

    def search(self, queries: Sequence[str], depth: int | None = None) -> list[list[Hit]]:
        limit = min(depth or self.top_k, len(self.chunks))
        results = []
        for query in progress(queries, desc=f"retrieving (bm25, {self.impl})"):
            scores = self.scores(query)
            best = best_first(scores, limit, self.ranks)
            results.append([Hit(self.chunks[i], float(scores[i]), rank) for rank, i in enumerate(best, 1)])
        return results


def bm25_postings(ids: np.ndarray, lengths: np.ndarray, vocabulary: int, k1: float, b: float) -> dict:
    """The BM25 index as bm25s keeps it (`BM25.scores`): for each term (rows), the chunks that use
    it and its score in each, in CSC arrays `data`, `indices`, `indptr` (float32, int32). `ids` are
    the chunks' token ids one after the other, `lengths` the chunks' token counts. bm25s's own
    `BM25.index` computes the same arrays with a Python loop per chunk (Counter, small arrays):
    ~2.5 minutes for 10^6 chunks on this machine; these numpy passes take seconds. The score is
    bm25s's method="atire" term part with idf_method="robertson", i.e. rank-bm25's formula."""
    docs = len(lengths)
    doc_of = np.repeat(np.arange(docs, dtype=np.int64), lengths)
    pairs, tf = np.unique(ids.astype(np.int64) * docs + doc_of, return_counts=True)  # sorted: term, then chunk
    terms, chunks = pairs // docs, (pairs % docs).astype(np.int32)
    df = np.bincount(terms, minlength=vocabulary)
    inner = np.maximum((docs - df + 0.5) / (df + 0.5), 1.0)  # robertson without negative idf (bm25s's default)
    idf = np.log(inner).astype(np.float32)
    length_norm = (k1 * (1 - b + b * lengths / lengths.mean())).astype(np.float32)
    tf = tf.astype(np.float32)
    data = idf[terms] * (tf * np.float32(k1 + 1) / (tf + length_norm[chunks]))
    indptr = np.zeros(vocabulary + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    return {"data": data.astype(np.float32), "indices": chunks, "indptr": indptr, "num_docs": docs}


TIE_DIGITS = 5  # scores equal to 5 significant digits are a tie, ordered by chunk id (see `best_first`)


def rounded(scores: np.ndarray) -> np.ndarray:
    """`scores` rounded to `TIE_DIGITS` significant digits: scores that differ only in their last
    bits (a float32 and a float64 path, the order of a sum) fall together, so that every retriever
    orders them the same way, by chunk id."""
    scores = np.asarray(scores, dtype=np.float64)
    magnitude = np.floor(np.log10(np.abs(scores), where=scores != 0, out=np.zeros_like(scores)))
    scale = 10.0 ** (TIE_DIGITS - 1 - magnitude)
    return np.round(scores * scale) / scale


def id_ranks(chunks: Sequence[Chunk]) -> np.ndarray:
    """Each chunk's place among the chunks sorted by id: the order of tied scores."""
    ranks = np.empty(len(chunks), dtype=np.int64)
    ranks[np.argsort(np.array([c.chunk_id for c in chunks]), kind="stable")] = np.arange(len(chunks))
    return ranks


def best_first(scores: np.ndarray, limit: int, ranks: np.ndarray) -> np.ndarray:
    """The indices of the `limit` highest scores, best first; scores equal to `TIE_DIGITS`
    significant digits in the order of `ranks` (`id_ranks`: chunk id order), without sorting every
    score: only those within one rounding step of the `limit`-th best are looked at."""
    if limit >= len(scores):
        return np.lexsort((ranks, -rounded(scores)))
    threshold = float(scores[np.argpartition(-scores, limit - 1)[limit - 1]])
    near = np.flatnonzero(scores >= threshold - abs(threshold) * 10.0 ** (1 - TIE_DIGITS))
    key, cut = rounded(scores[near]), rounded(np.array([threshold]))[0]
    above, tied = near[key > cut], near[key == cut]
    above = above[np.lexsort((ranks[above], -key[key > cut]))]
    need = limit - len(above)
    if need < len(tied):
        tied = tied[np.argpartition(ranks[tied], need - 1)[:need]]
    return np.concatenate([above, tied[np.argsort(ranks[tied])]])


def in_tie_order(scored: Sequence[tuple[Chunk, float]], limit: int) -> list[tuple[Chunk, float]]:
    """`(chunk, score)` pairs best first, cut at `limit`, ties as `best_first` orders them."""
    order = best_first(np.array([s for _, s in scored], dtype=np.float64), limit, id_ranks([c for c, _ in scored]))
    return [scored[i] for i in order]


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
