"""The `bm25` retriever: Okapi BM25 over the chunks' words (bm25s or rank_bm25)."""
from __future__ import annotations

from array import array
from typing import Literal, Sequence

import numpy as np

from ragexp.base.progress import progress
from ragexp.base.text import words
from ragexp.types import Chunk, Hit
from ragexp.base.settings import Fraction, NonNegativeFloat, PositiveInt
from ragexp.components.retrievers.base import Retriever
from ragexp.components.retrievers.ties import best_first, id_ranks


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

    def __init__(self, top_k: PositiveInt, k1: NonNegativeFloat, b: Fraction,
                 impl: BM25Impl):
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
