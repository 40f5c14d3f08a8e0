"""Retrieval metrics over one query's ranking, computed the way NIST trec_eval computes them.

A `Ranking` holds the relevance grade of each retrieved item in rank order and the grades of
every judged item (the pool). An item counts as relevant when its grade is at least the
relevance level (trec_eval's `-l`, default 1). NDCG is graded: the gain of an item is its
grade (trec_eval's linear gain) or `2^grade - 1` (exponential, the specification's formula),
discounted by log2(rank + 1); the ideal ranking orders every judged item with a positive
grade, retrieved or not. A cutoff `k` looks at the first k items; when fewer were retrieved
the rest count as non-relevant (P@k still divides by k).

| ragexp | trec_eval | value for one query |
| --- | --- | --- |
| `hit_rate@k` | `success_k` | 1 if a relevant item is in the top k, else 0 |
| `mrr` | `recip_rank` | 1 / rank of the first relevant item (0 if none) |
| `ndcg@k` | `ndcg_cut_k` | DCG@k / ideal DCG@k |
| `recall@k` | `recall_k` | relevant items in the top k / relevant items judged |
| `precision@k` | `P_k` | relevant items in the top k / k |
| `map` | `map` | sum of the precision at each relevant retrieved item / relevant items judged |
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ragexp.errors import RagexpError
from ragexp.base.names import MetricName

UNJUDGED = -1

GAINS: dict[str, Callable[[int], float]] = {
    "linear": lambda grade: float(grade),  # trec_eval
    "exponential": lambda grade: 2.0 ** grade - 1.0,  # the specification's 2^rel - 1
}


@dataclass(frozen=True)
class Ranking:
    """One query's retrieved items judged against its relevance judgements."""

    grades: tuple[int, ...]  # grade of each retrieved item, best first; UNJUDGED (-1) when not judged
    pool: tuple[int, ...]  # grades (>= 0) of every judged item, retrieved or not
    ids: tuple[str, ...] = ()  # the retrieved items (documents or chunks), for the per-question table

    def relevant_count(self, level: int) -> int:
        return sum(1 for g in self.pool if g >= level)


def gain_function(name: str) -> Callable[[int], float]:
    if name not in GAINS:
        raise RagexpError(f"metrics.ndcg_gain: {name!r} is not one of {', '.join(GAINS)}")
    return GAINS[name]


@dataclass(frozen=True)
class Measure:
    """One retrieval metric at an optional cutoff; `value(ranking)` scores one query."""

    name: MetricName
    level: int = 1
    gain: str = "linear"

    def top(self, ranking: Ranking) -> tuple[int, ...]:
        return ranking.grades if self.name.cutoff is None else ranking.grades[: self.name.cutoff]

    def value(self, ranking: Ranking) -> float:
        raise NotImplementedError


class HitRate(Measure):
    def value(self, ranking: Ranking) -> float:
        return 1.0 if any(g >= self.level for g in self.top(ranking)) else 0.0


class ReciprocalRank(Measure):
    def value(self, ranking: Ranking) -> float:
        for rank, grade in enumerate(self.top(ranking), start=1):
            if grade >= self.level:
                return 1.0 / rank
        return 0.0


class NDCG(Measure):
    def value(self, ranking: Ranking) -> float:
        gain = gain_function(self.gain)
        dcg = sum(gain(g) / math.log2(i + 2) for i, g in enumerate(self.top(ranking)) if g > 0)
        ideal = sorted((g for g in ranking.pool if g > 0), reverse=True)
        if self.name.cutoff is not None:
            ideal = ideal[: self.name.cutoff]
        idcg = sum(gain(g) / math.log2(i + 2) for i, g in enumerate(ideal))
        return dcg / idcg if idcg > 0 else 0.0


class Recall(Measure):
    def value(self, ranking: Ranking) -> float:
        relevant = ranking.relevant_count(self.level)
        found = sum(1 for g in self.top(ranking) if g >= self.level)
        return found / relevant if relevant else 0.0


class Precision(Measure):
    def value(self, ranking: Ranking) -> float:
        top = self.top(ranking)
        found = sum(1 for g in top if g >= self.level)
        denominator = self.name.cutoff if self.name.cutoff is not None else len(top)
        return found / denominator if denominator else 0.0


class AveragePrecision(Measure):
    def value(self, ranking: Ranking) -> float:
        relevant = ranking.relevant_count(self.level)
        found, total = 0, 0.0
        for rank, grade in enumerate(self.top(ranking), start=1):
            if grade >= self.level:
                found += 1
                total += found / rank
        return total / relevant if relevant else 0.0


MEASURES: dict[str, type[Measure]] = {
    "hit_rate": HitRate,
    "mrr": ReciprocalRank,
    "ndcg": NDCG,
    "recall": Recall,
    "precision": Precision,
    "map": AveragePrecision,
}


def is_retrieval_metric(name: str) -> bool:
    try:
        return MetricName.parse(name).base in MEASURES
    except RagexpError:
        return False


def measure(name: str | MetricName, level: int = 1, gain: str = "linear", setting: str = "metrics.retrieval") -> Measure:
    """`measure("ndcg@10")` -> the NDCG measure at cutoff 10."""
    parsed = name if isinstance(name, MetricName) else MetricName.parse(name, setting)
    if parsed.base not in MEASURES:
        raise RagexpError(f"{setting}: {str(parsed)!r} is not a retrieval metric; use {', '.join(MEASURES)} "
                          "with an optional cutoff, e.g. ndcg@10")
    gain_function(gain)
    return MEASURES[parsed.base](parsed, level, gain)
