"""The `mmr` reranker: maximal marginal relevance over the candidates' vectors."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ragexp.types import Hit, Question
from ragexp.base.settings import Fraction, PositiveInt
from ragexp.components.rerankers.base import Reranker, ranked


class MMRReranker(Reranker):
    """Maximal marginal relevance with the run's embedder: picks, one at a time, the candidate with
    the highest (1 - diversity) * cos(question, candidate) - diversity * max cos(candidate, picked);
    diversity 0 is the embedder's own order by similarity, higher values push near-duplicates down.
    A hit's score is its MMR value when it was picked."""

    def __init__(self, embedder, candidates: PositiveInt, diversity: Fraction):
        self.embedder, self.candidates, self.diversity = embedder, candidates, float(diversity)

    def rerank(self, question: Question, hits: Sequence[Hit]) -> list[Hit]:
        if not hits:
            return []
        vectors = self.embedder.embed([question.text, *(h.chunk.text for h in hits)])
        relevance = vectors[1:] @ vectors[0]
        similarity = vectors[1:] @ vectors[1:].T
        closest = np.full(len(hits), -np.inf)  # each candidate's highest cosine with one already picked
        left = np.ones(len(hits), dtype=bool)
        order, scores = [], []
        for step in range(len(hits)):
            penalty = closest if step else np.zeros(len(hits))
            value = np.where(left, (1 - self.diversity) * relevance - self.diversity * penalty, -np.inf)
            best = int(np.argmax(value))  # ties: the retriever's order
            order.append(best)
            scores.append(float(value[best]))
            left[best] = False
            closest = np.maximum(closest, similarity[:, best])
        return ranked(hits, order, scores)
