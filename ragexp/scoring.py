"""Weights and per-run aggregates, named as in the specification."""
from __future__ import annotations

import statistics
from typing import Sequence

from ragexp.errors import RagexpError
from ragexp.metrics.names import MetricName
from ragexp.types import Judgement, QuestionResult
from ragexp.validation import NonNegativeFloat

UNIT = (0.0, 1.0)


class Weights:
    """overall = sum(avg_metric * weight) * (1 - hallucination_rate if hallucination_penalty).
    Each keyword names a judge metric and its weight; the weights must be >= 0 and sum to 1."""

    def __init__(self, hallucination_penalty: bool = True, **weights: NonNegativeFloat):
        self.weights = {metric: float(w) for metric, w in weights.items()}
        self.hallucination_penalty = hallucination_penalty

    @classmethod
    def constraints(cls, hallucination_penalty: bool = True, **weights: float) -> list[str]:
        """The weights sum to 1, checked by ragexp.validation before any work."""
        total = sum(weights.values())
        if weights and abs(total - 1.0) <= 1e-6:
            return []
        shown = " + ".join(f"{k}={v:g}" for k, v in weights.items()) or "no weight"
        return [f"{shown} = {total:g}; the weights must sum to 1 (set weights.<metric>=...)"]

    def check(self, judge_name: str, metrics: Sequence[str]) -> None:
        """Stop before any work when a weighted metric is one the judge does not produce."""
        missing = [m for m in self.weights if m not in metrics]
        if missing:
            raise RagexpError(f"weights: {', '.join(missing)} not produced by judge {judge_name!r} "
                              f"(it gives {', '.join(metrics)}); choose a matching weights= option")

    def overall(self, averages: dict[str, float], hallucination_rate: float) -> float:
        score = sum(averages[m] * w for m, w in self.weights.items())
        return score * (1.0 - hallucination_rate) if self.hallucination_penalty else score


def summarise(judgements: Sequence[Judgement], weights: Weights) -> dict[str, float]:
    """avg_<metric> for each metric, hallucination_rate and overall_score of some judgements."""
    metrics = list(dict.fromkeys(m for j in judgements for m in j.scores))
    averages = {m: sum(j.scores[m] for j in judgements) / len(judgements) for m in metrics}
    rate = sum(float(j.hallucination) for j in judgements) / len(judgements)
    return {**{f"avg_{m}": v for m, v in averages.items()}, "hallucination_rate": rate,
            "overall_score": weights.overall(averages, rate)}


def mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 4)


def aggregate(results: Sequence[QuestionResult], weights: Weights) -> dict[str, float]:
    """The specification's aggregates over judged questions: avg_<metric> for each judge metric,
    hallucination_rate, the counts and overall_score; failed questions are only counted.
    Then the means of the answer metrics (avg_<metric>, over the questions that have them) and of
    the retrieval metrics (keyed `ndcg_at_10`, over the questions with something relevant to
    find; the others are counted in retrieval_excluded_questions). Nothing to average: no key.
    When the judge judged each question N > 1 times, each judge aggregate is the mean of the N
    runs' aggregates, and <aggregate>_std their standard deviation (the judge's own noise)."""
    judged = [r.judgement for r in results if r.judgement is not None]
    counts = {"total_questions": len(results), "failed_questions": len(results) - len(judged)}
    aggregates: dict[str, float] = dict(counts)
    if judged:
        repeats = min(len(j.repeats) for j in judged)
        if repeats < 2:
            means, spread = summarise(judged, weights), {}
        else:
            runs = [summarise([j.repeats[r] for j in judged], weights) for r in range(repeats)]
            means = {k: statistics.fmean(run[k] for run in runs) for k in runs[0]}
            spread = {f"{k}_std": round(statistics.stdev(run[k] for run in runs), 4) for k in runs[0]}
        overall = round(means.pop("overall_score"), 4)
        aggregates = {**{k: round(v, 4) for k, v in means.items()}, **counts, "overall_score": overall, **spread}
    for metric in dict.fromkeys(m for r in results for m in r.generation):
        aggregates[f"avg_{metric}"] = mean([r.generation[metric] for r in results if metric in r.generation])
    scored = [r for r in results if r.retrieval]
    for name in dict.fromkeys(n for r in scored for n in r.retrieval):
        aggregates[MetricName.parse(name).key] = mean([r.retrieval[name] for r in scored if name in r.retrieval])
    aggregates["retrieval_excluded_questions"] = len(results) - len(scored)
    return aggregates


def aggregate_scales(judge_scales: dict[str, tuple[float, float]], weights: Weights,
                     answer_metrics: Sequence[str], retrieval_metrics: Sequence[str]) -> dict[str, tuple[float, float]]:
    """The scale of each aggregate that has a known one (targets and the gate compare on it)."""
    scales = {f"avg_{m}": (lo, hi) for m, (lo, hi) in judge_scales.items()}
    scales["hallucination_rate"] = UNIT
    weighted = {(judge_scales[m][0], judge_scales[m][1]) for m in weights.weights if m in judge_scales}
    if len(weighted) == 1 and all(m in judge_scales for m in weights.weights):
        scales["overall_score"] = weighted.pop()
    scales.update({f"avg_{m}": UNIT for m in answer_metrics})
    scales.update({MetricName.parse(n).key: UNIT for n in retrieval_metrics})
    return scales
