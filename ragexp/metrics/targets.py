"""Targets and warning signs, applied to a run's aggregates: each metric
that has a target gets `good`, `ok` or `warning`. A target holds for one scale only (the
single-call judge's 1-10 tables are not the triad's 0-1 ones), so a metric is rated only when
its scale is known and matches.

A metric that holds by construction for the run's configuration (a component's
`holds_by_construction`, see `ragexp.metrics.scoring.by_construction`: the faithfulness of an extractive
answer, which copies context sentences) is marked `by construction` instead: its value says
nothing about the system's quality, whatever its target says."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

from ragexp.errors import RagexpError
from ragexp.base.names import MetricName


@dataclass(frozen=True)
class Target:
    """`good` and `warning` bounds of one metric on one scale. Higher is better unless
    `lower_is_better`; `good` is inclusive, `warning` strict (good >= 8, warning < 6)."""

    metric: str  # an aggregate key, or a retrieval family (hit_rate) matching every cutoff
    scale: tuple[float, float]
    good: float
    warning: float
    source: str
    lower_is_better: bool = False

    def applies(self, key: str, scale: tuple[float, float] | None) -> bool:
        if scale is None or tuple(scale) != self.scale:
            return False
        if key == self.metric:
            return True
        try:
            name = MetricName.parse(key)
        except RagexpError:
            return False
        return name.cutoff is not None and name.base == self.metric

    def status(self, value: float) -> str:
        if self.lower_is_better:
            return "good" if value <= self.good else "warning" if value > self.warning else "ok"
        return "good" if value >= self.good else "warning" if value < self.warning else "ok"

    def describe(self) -> str:
        if self.lower_is_better:
            return f"good <= {self.good:g}, warning > {self.warning:g}"
        return f"good >= {self.good:g}, warning < {self.warning:g}"


ONE_TO_TEN, UNIT = (1.0, 10.0), (0.0, 1.0)
SINGLE_CALL = "spec 000, interpretation guide"
BY_CONSTRUCTION = "by construction"
TARGETS: tuple[Target, ...] = (
    # the share of questions with a hallucination, for every judge (spec 000: count(hallucination) / questions)
    Target("hallucination_rate", UNIT, 0.1, 0.2, SINGLE_CALL, lower_is_better=True),
    # the single-call judge (1-10)
    Target("avg_context_relevance", ONE_TO_TEN, 8, 6, SINGLE_CALL),
    Target("avg_answer_similarity", ONE_TO_TEN, 8, 6, SINGLE_CALL),
    Target("avg_faithfulness", ONE_TO_TEN, 9, 7, SINGLE_CALL),
    # the RAG triad (0-1): good from the "good" band, warning in the "poor" band
    Target("avg_context_relevance", UNIT, 0.7, 0.5, "spec 6.2.1"),
    Target("avg_faithfulness", UNIT, 0.85, 0.7, "spec 6.2.2"),
    Target("avg_answer_relevance", UNIT, 0.7, 0.5, "spec 6.2.3"),
    Target("overall_score", UNIT, 0.75, 0.6, "spec 6.2.4 (triad composite)"),
    # retrieval (0-1); hit rate and MRR have no band between poor and good
    Target("hit_rate", UNIT, 0.6, 0.6, "spec 6.3.1"),
    Target("mrr", UNIT, 0.5, 0.5, "spec 6.3.2"),
    Target("ndcg", UNIT, 0.7, 0.5, "spec 6.3.3"),
    # generation (0-1); the share of unsupported claims (triad) or answer sentences (offline judge)
    Target("avg_claim_hallucination_rate", UNIT, 0.05, 0.1, "spec 6.4.1", lower_is_better=True),
    Target("avg_conciseness", UNIT, 0.7, 0.7, "spec 6.4.3"),
    Target("avg_coherence", UNIT, 0.8, 0.8, "spec 6.4.3"),
)


def target_for(key: str, scale: tuple[float, float] | None, extra: Sequence[Target] = ()) -> Target | None:
    """The target of an aggregate on its scale: one of `extra` (a rubric criterion's own) first."""
    return next((t for t in (*extra, *TARGETS) if t.applies(key, scale)), None)


def assess(aggregates: Mapping[str, float], scales: Mapping[str, tuple[float, float]],
           constructed: Collection[str] = (), extra: Sequence[Target] = (), untargeted: Collection[str] = ()) -> dict[str, str]:
    """aggregate key -> good / ok / warning, for each aggregate that has a target on its scale
    (`extra` ones first: the targets a rubric gives its criteria) and is not `untargeted` (a
    rubric's overall_score, which no built-in target is about); `by construction` for each
    aggregate in `constructed` (target or not)."""
    statuses = {}
    for key, value in aggregates.items():
        if key in constructed:
            statuses[key] = BY_CONSTRUCTION
            continue
        if key in untargeted and not any(t.metric == key for t in extra):
            continue
        target = target_for(key, scales.get(key), extra)
        if target is not None:
            statuses[key] = target.status(float(value))
    return statuses
