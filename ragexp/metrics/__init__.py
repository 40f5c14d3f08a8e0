"""The metrics ragexp computes itself from the golden data (`metrics=default`): retrieval
metrics of each question's ranking and answer metrics against the expected answers.
Judge metrics (faithfulness, ...) come from the judge; see ragexp.judges."""
from __future__ import annotations

from typing import Iterable, Literal, Sequence

from ragexp.errors import RagexpError
from ragexp.base.names import MetricName, metric_key
from ragexp.metrics.answers import AnswerMeasure, answer_measure
from ragexp.metrics.retrieval import Measure, Ranking, measure
from ragexp.base.settings import PositiveInt

__all__ = ["MetricName", "MetricSet", "metric_key"]


class MetricSet:
    """`retrieval`: metric names with optional cutoffs (hit_rate@5, mrr, ndcg@10, recall@10,
    precision@5, map), scored on the first `depth` retrieved chunks (at least the retriever's
    top_k); `ndcg_gain`: linear (trec_eval) or exponential (2^grade - 1). `answer`: the answer
    metrics against the expected answers to compute, by name (ragexp.metrics.answers:
    `correctness`, the cosine by `embedder`, none without one; `exact_match` and `token_f1`,
    which follow SQuAD)."""

    def __init__(self, retrieval: Sequence[str],
                 ndcg_gain: Literal["linear", "exponential"], depth: PositiveInt, embedder,
                 answer: Sequence[str]):
        self.names = list(dict.fromkeys(str(MetricName.parse(n)) for n in retrieval))
        self.answer = [answer_measure(name, embedder) for name in dict.fromkeys(answer)]
        self.ndcg_gain, self.depth, self.embedder = ndcg_gain, depth, embedder

    @classmethod
    def constraints(cls, retrieval: Sequence[str], answer: Sequence[str], **_) -> list[str]:
        """Every name a retrieval metric, or an answer metric, checked by ragexp.validation before any work."""
        problems = []
        for name in retrieval:
            try:
                measure(name, setting="retrieval")
            except RagexpError as err:
                problems.append(str(err))
        for name in answer:
            try:
                answer_measure(name, setting="answer")
            except RagexpError as err:
                problems.append(str(err))
        return problems

    def require(self, names: Iterable[str]) -> None:
        """Also computes these retrieval metrics (e.g. the ones a quality gate checks)."""
        for name in names:
            canonical = str(MetricName.parse(name))
            if canonical not in self.names:
                self.names.append(canonical)

    def measures(self, level: int) -> list[Measure]:
        return [measure(name, level, self.ndcg_gain) for name in self.names]

    def answer_metrics(self) -> list[str]:
        """The names `answer_scores` gives: those chosen that can score (correctness only with an embedder)."""
        return [m.name for m in self.answer_measures()]

    def answer_measures(self) -> list[AnswerMeasure]:
        return [m for m in self.answer if m.available()]

    def retrieval_scores(self, ranking: Ranking, level: int) -> dict[str, float]:
        return {str(m.name): m.value(ranking) for m in self.measures(level)}

    def answer_scores(self, prediction: str, answers: Sequence[str]) -> dict[str, float]:
        return {m.name: m.value(prediction, answers) for m in self.answer_measures()}
