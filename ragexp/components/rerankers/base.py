"""Rerankers: a question and the retriever's first `candidates` hits -> the same hits in a new order,
best first, each with the reranker's score and its new rank. One class per `reranker` option
(conf/reranker/); `ragexp.run.rerank` runs them between retrieval and generation."""
from __future__ import annotations

from typing import Sequence

from ragexp.types import Hit, Question


class Reranker:
    """Reorders the first `candidates` hits of a question (the rest of the retriever's list
    follows them unchanged). `active` is False for `none`: then no rerank stage runs at all."""

    candidates: int = 0
    active = True

    def check(self) -> None:
        """Raises RagexpError for settings that cannot work, before any work (the pipeline calls it
        when it builds the run's components)."""

    def identity(self) -> dict:
        """What determines its output besides its settings (a model's files), for the cache key."""
        return {}

    def rerank(self, question: Question, hits: Sequence[Hit]) -> list[Hit]:
        raise NotImplementedError


def ranked(hits: Sequence[Hit], order: Sequence[int], scores: Sequence[float]) -> list[Hit]:
    """`hits` in `order` (indices into hits), with `scores` (one per hit of `order`) and ranks 1..n."""
    return [Hit(hits[i].chunk, float(score), rank) for rank, (i, score) in enumerate(zip(order, scores), start=1)]


class NoReranker(Reranker):
    """`none`: the retriever's order is the final one (no rerank stage runs)."""

    active = False

    def rerank(self, question: Question, hits: Sequence[Hit]) -> list[Hit]:
        return list(hits)
