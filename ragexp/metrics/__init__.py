"""The metrics ragexp computes itself from the golden data (`metrics=default`): retrieval
metrics of each question's ranking and answer metrics against the expected answers.
Judge metrics (faithfulness, ...) come from the judge; see ragexp.judges."""
from __future__ import annotations

from typing import Iterable, Literal, Sequence

from ragexp.errors import RagexpError
from ragexp.metrics.generation import exact_match, token_f1
from ragexp.base.names import MetricName, metric_key
from ragexp.metrics.retrieval import Measure, Ranking, measure
from ragexp.base.settings import PositiveInt

__all__ = ["MetricName", "MetricSet", "metric_key"]

GENERATION = ("correctness", "exact_match", "token_f1")
# the retrieval metrics of `metrics=default` (conf/metrics/default.yaml lists the same)
DEFAULT_RETRIEVAL = ("hit_rate@1", "hit_rate@5", "mrr", "ndcg@10", "recall@5", "recall@10", "precision@5", "map")


class MetricSet:
    """`retrieval`: metric names with optional cutoffs (hit_rate@5, mrr, ndcg@10, recall@10,
    precision@5, map), scored on the first `depth` retrieved chunks (at least the retriever's
    top_k); `ndcg_gain`: linear (trec_eval) or exponential (2^grade - 1). `answer`: which of the
    answer metrics against the expected answers to compute: `correctness`, the cosine of the
    generated and the best-matching expected answer by `embedder` (0-1, negative cosines count 0;
    none without an embedder), and `exact_match` and `token_f1`, which follow SQuAD."""

    def __init__(self, retrieval: Sequence[str],
                 ndcg_gain: Literal["linear", "exponential"], depth: PositiveInt, embedder,
                 answer: Sequence[str]):
        self.names = list(dict.fromkeys(str(MetricName.parse(n)) for n in retrieval))
        self.answer = list(dict.fromkeys(answer))
        self.ndcg_gain, self.depth, self.embedder = ndcg_gain, depth, embedder

    @classmethod
    def constraints(cls, retrieval: Sequence[str], answer: Sequence[str] = GENERATION, **_) -> list[str]:
        """Every name a retrieval metric, or an answer metric, checked by ragexp.validation before any work."""
        problems = []
        for name in retrieval:
            try:
                measure(name, setting="retrieval")
            except RagexpError as err:
                problems.append(str(err))
        problems += [f"metrics.answer: {name!r} is not an answer metric (one of {', '.join(GENERATION)})"
                     for name in answer if name not in GENERATION]
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
        """The names `answer_scores` gives: those chosen (correctness only with an embedder)."""
        return [m for m in self.answer if m != "correctness" or self.embedder is not None]

    def retrieval_scores(self, ranking: Ranking, level: int) -> dict[str, float]:
        return {str(m.name): m.value(ranking) for m in self.measures(level)}

    def answer_scores(self, prediction: str, answers: Sequence[str]) -> dict[str, float]:
        chosen, scores = self.answer_metrics(), {}
        if "correctness" in chosen:
            vectors = self.embedder.embed([prediction or " ", *answers])
            cosine = float(max(vectors[1:] @ vectors[0])) if prediction.strip() else 0.0
            scores["correctness"] = round(max(0.0, cosine), 4)
        if "exact_match" in chosen:
            scores["exact_match"] = exact_match(prediction, answers)
        if "token_f1" in chosen:
            scores["token_f1"] = round(token_f1(prediction, answers), 4)
        return scores
