"""Weights and per-run aggregates, named as in the specification."""
from __future__ import annotations

from typing import Sequence

from ragexp.errors import RagexpError
from ragexp.types import QuestionResult

METRICS = ("context_relevance", "answer_similarity", "faithfulness")


class Weights:
    """overall = (cr * w_cr + as * w_as + f * w_f) * (1 - hallucination_rate if penalty)."""

    def __init__(self, context_relevance: float, answer_similarity: float, faithfulness: float,
                 hallucination_penalty: bool = True):
        self.weights = {"context_relevance": context_relevance, "answer_similarity": answer_similarity,
                        "faithfulness": faithfulness}
        self.hallucination_penalty = hallucination_penalty
        total = sum(self.weights.values())
        if abs(total - 1.0) > 1e-6 or any(w < 0 for w in self.weights.values()):
            shown = " + ".join(f"{k}={v}" for k, v in self.weights.items())
            raise RagexpError(f"weights: {shown} = {total:g}; the weights must be >= 0 and sum to 1 (set weights.<name>=...)")

    def overall(self, averages: dict[str, float], hallucination_rate: float) -> float:
        score = sum(averages[m] * w for m, w in self.weights.items())
        return score * (1.0 - hallucination_rate) if self.hallucination_penalty else score


def aggregate(results: Sequence[QuestionResult], weights: Weights) -> dict[str, float]:
    """The specification's aggregates over judged questions; failed ones are only counted.
    With no judged question there is nothing to average: only the counts are returned."""
    judged = [r.judgement for r in results if r.judgement is not None]
    counts = {"total_questions": len(results), "failed_questions": len(results) - len(judged)}
    if not judged:
        return counts
    averages = {m: sum(getattr(j, m) for j in judged) / len(judged) for m in METRICS}
    rate = sum(j.hallucination for j in judged) / len(judged)
    return {
        **{f"avg_{m}": round(v, 4) for m, v in averages.items()},
        "hallucination_rate": round(rate, 4),
        **counts,
        "overall_score": round(weights.overall(averages, rate), 4),
    }
