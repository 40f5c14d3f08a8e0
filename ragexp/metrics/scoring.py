"""Weights and per-run aggregates: how each question's scores become the run's numbers."""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, fields, replace
from typing import Collection, Iterable, Self, Sequence

from ragexp.errors import RagexpError
from ragexp.base.names import MetricName, metric_key
from ragexp.types import Judgement, QuestionResult
from ragexp.base.settings import NonNegativeFloat

UNIT = (0.0, 1.0)


class Weights:
    """overall = sum(avg_metric * weight) * (1 - hallucination_rate if hallucination_penalty)
    (computed by the `overall` Aggregate that `aggregation_spec` makes of these weights).
    Each keyword names a judge metric and its weight; the weights must be >= 0 and sum to 1."""

    def __init__(self, hallucination_penalty: bool, **weights: NonNegativeFloat):
        self.weights = {metric: float(w) for metric, w in weights.items()}
        self.hallucination_penalty = hallucination_penalty
        # metric -> (lowest, highest): each mean is mapped onto 0-1 before it is weighted (a rubric's
        # criteria, each on its own scale); empty: the means are weighted as they are
        self.unit_scales: dict[str, tuple[float, float]] = {}

    def overall(self, repeats: int = 1, left_out: Collection[str] = ()) -> Aggregate:
        """The overall_score aggregate these weights make: sum(mean * weight), each mean first mapped
        onto 0-1 through `unit_scales` when set, times 1 - hallucination_rate with the penalty.
        `left_out`: the metrics (and `hallucination`) no question was judged on because nothing was
        there to judge them on (a system that gave no contexts has no faithfulness to weigh): their
        weights are dropped and the others scaled to sum to 1; no verdict, no penalty."""
        given = {m: w for m, w in self.weights.items() if m not in left_out}
        if given and len(given) < len(self.weights) and sum(given.values()):
            given = {m: w / sum(given.values()) for m, w in given.items()}
        elif not given:
            given = dict(self.weights)
        penalize = self.hallucination_penalty and "hallucination" not in left_out
        penalty = ("hallucination",) if penalize else ()
        weights, offset = list(given.values()), 0.0
        if self.unit_scales:  # w * (mean - lo) / (hi - lo) = (w / (hi - lo)) * mean - w * lo / (hi - lo)
            spans = [self.unit_scales[m] for m in given]
            weights = [w / (hi - lo) for w, (lo, hi) in zip(given.values(), spans)]
            offset = -sum(w * lo / (hi - lo) for w, (lo, hi) in zip(given.values(), spans))
        return Aggregate("overall_score", (*given, *penalty), "overall", weights=tuple(weights),
                         penalty=penalize, repeats=repeats, offset=round(offset, 12))

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


class JudgesWeights:
    """`weights=judge`: the weights the judge declares for its own metrics (`Judge.weights`), so
    that a judge with metrics of its own brings how they make `overall_score` (ragexp.config.build
    turns this choice into that judge's `Weights`)."""

    def __init__(self, hallucination_penalty: bool):
        self.hallucination_penalty = hallucination_penalty

    def of(self, judge) -> Weights:
        declared = dict(judge.weights)
        if not declared:
            raise RagexpError(f"weights=judge: judge {judge.name!r} declares no weights for its metrics; "
                              "choose a weights= option")
        problems = Weights.constraints(**declared)
        if problems:
            raise RagexpError(f"weights=judge: judge {judge.name!r} declares {problems[0]}")
        # no penalty from a judge that makes no hallucination verdict (a rubric's)
        weights = Weights(self.hallucination_penalty and judge.flags_hallucination, **declared)
        if judge.weights_on_unit_scale:
            weights.unit_scales = {m: judge.scales[m] for m in declared}
        return weights


@dataclass(frozen=True)
class Aggregate:
    """How one aggregate of a run is made from the per-question table (`report.question_table`):
    `kind` over the `inputs` columns of the rows named by `rows`. Written to aggregates.json
    beside results.json and logged with the run, so `python -m ragexp.compare` recomputes each
    aggregate (and its bootstrap CI) from the table without re-deriving anything.

    kinds: `mean` (of one column), `overall` (sum of the input means times `weights`, times
    1 - the mean of the last input, `hallucination`, when `penalty`), `count` (of rows), `std`
    (standard deviation across the judge's `repeats` of aggregate `of`), `total` (summed by the
    run's LLM session, not per question), `gate` (1 when the quality gate passed).
    rows: `all`, `judged` (status judged, inputs set), `failed`, `valued` (every input set),
    `unvalued` (no input set). `repeats` > 1: computed on each repeat's judgements and averaged.
    `where` (column, value) keeps only the rows of one slice of the questions (see `slice_spec`)."""

    name: str
    inputs: tuple[str, ...]
    kind: str
    rows: str = "judged"
    weights: tuple[float, ...] = ()
    penalty: bool = False
    repeats: int = 1
    of: str = ""
    where: tuple[str, str] | tuple[()] = ()
    offset: float = 0.0

    def takes(self, row: dict) -> bool:
        """Whether a per-question row (column -> value, None when unset) enters this aggregate."""
        if self.where and str(row.get(self.where[0]) or "") != self.where[1]:
            return False
        if self.rows == "all":
            return True
        if self.rows == "failed":
            return row.get("status") == "failed"
        if self.rows == "unvalued":
            return all(row.get(c) is None for c in self.inputs)
        judged = self.rows != "judged" or row.get("status") == "judged"
        return judged and all(row.get(c) is not None for c in self.inputs)

    def from_means(self, means: Sequence, n: int = 1):
        """The aggregate from the means of its inputs over its `n` rows: floats, or one numpy array
        per input (resampled means, for bootstrap CIs in ragexp.compare)."""
        if self.kind == "overall":
            score = sum(m * w for m, w in zip(means, self.weights)) + self.offset
            return score * (1.0 - means[len(self.weights)]) if self.penalty else score
        if self.kind == "sum":
            return means[0] * n
        return means[0]

    def value(self, rows: Sequence[dict]) -> float | None:
        """This aggregate of per-question rows (None: no row to average)."""
        chosen = [row for row in rows if self.takes(row)]
        if self.kind == "count":
            return len(chosen)
        if not chosen:
            return None
        return self.from_means([sum(float(row[c]) for row in chosen) / len(chosen) for c in self.inputs], len(chosen))

    def to_json(self) -> dict:
        """name, inputs, kind and rows, and the other fields where they are not their default."""
        shown = {f.name: getattr(self, f.name) for f in fields(self)
                 if f.name in ("name", "inputs", "kind", "rows") or getattr(self, f.name) != f.default}
        return {**shown, "inputs": list(self.inputs), **({"weights": list(self.weights)} if self.weights else {}),
                **({"where": list(self.where)} if self.where else {})}

    @classmethod
    def from_json(cls, entry: dict) -> Self:
        return cls(**{**entry, "inputs": tuple(entry.get("inputs", ())), "weights": tuple(entry.get("weights", ())),
                      "where": tuple(entry.get("where", ()))})


def aggregate_key(metric: str, retrieval: bool = False) -> str:
    """The key of a metric's run aggregate: a retrieval metric's MLflow key (`ndcg@10` ->
    `ndcg_at_10`, the mean over questions), else `avg_<metric>` (judge and answer metrics)."""
    return MetricName.parse(metric).key if retrieval else f"avg_{metric}"


def by_construction(*components: object) -> frozenset[str]:
    """The aggregates whose value follows from how the run's components work, not from how well
    the system does: each component may declare `holds_by_construction`, the judge metrics (and
    `hallucination`) it fixes whatever the data (the extractive generator copies context
    sentences, so its answers are faithful and hallucinate nothing by construction). Returned as
    aggregate keys: `faithfulness` -> `avg_faithfulness`, `hallucination` -> `hallucination_rate`."""
    metrics: Iterable[str] = (m for c in components for m in getattr(c, "holds_by_construction", ()))
    return frozenset("hallucination_rate" if m == "hallucination" else aggregate_key(m) for m in metrics)


SLICE_VALUE = re.compile(r"[^\w.\- ]")


def slice_key(aggregate: str, column: str, value: str) -> str:
    """The key of an aggregate over one slice of the questions: `avg_faithfulness/kind/procedural`
    (MLflow metric names allow letters, digits, `_ - . /` and spaces; other characters become `_`)."""
    return f"{aggregate}/{column}/{SLICE_VALUE.sub('_', value)}"


def score_row(result: QuestionResult, judgement: Judgement | None = None) -> dict:
    """A question's scores keyed by their column in the per-question table: the judge's metrics and
    `hallucination` (of `judgement`, default the question's), answer metrics, retrieval metrics, and
    the columns that slice the questions (`kind`, `source`)."""
    j = judgement or result.judgement
    judged = {**j.scores, "hallucination": j.hallucination} if j is not None else {}
    return {**result.question.attributes, "status": result.status, "kind": result.question.kind,
            "source": result.question.source, **judged, **result.generation,
            **{metric_key(name): value for name, value in result.retrieval.items()}}


def slice_spec(spec: Sequence[Aggregate], results: Sequence[QuestionResult],
               columns: Sequence[str]) -> tuple[Aggregate, ...]:
    """Each aggregate made from the questions (means, overall, counts) again over each slice of the
    questions: per value of each column in `columns` (e.g. kind, source) that takes two or more
    values in the run. Keyed by `slice_key`."""
    rows = [score_row(r) for r in results]
    sliced = []
    for column in columns:
        values = sorted({str(row.get(column) or "") for row in rows} - {""})
        if len(values) < 2:
            continue  # one value: the slice is the whole run
        for value in values:
            sliced += [replace(a, name=slice_key(a.name, column, value), where=(column, value))
                       for a in spec if a.kind in ("mean", "overall", "count") and not a.where and not a.name.startswith("n_")]
    return tuple(sliced)


def aggregation_spec(results: Sequence[QuestionResult], weights: Weights) -> tuple[Aggregate, ...]:
    """The specification's aggregates, for the metrics the results hold: avg_<metric> of each judge
    metric, hallucination_rate, the counts and overall_score over judged questions (failed ones are
    only counted); the means of the answer metrics (over the questions that have them) and of the
    retrieval metrics (keyed `ndcg_at_10`, over the questions with something relevant to find; the
    others are counted in retrieval_excluded_questions). Nothing to average: no aggregate.
    When the judge judged each question N > 1 times, each judge aggregate is the mean of the N
    repeats' aggregates, and <aggregate>_std their standard deviation (the judge's own noise)."""
    judged = [r.judgement for r in results if r.judgement is not None]
    counts = [Aggregate("total_questions", (), "count", "all"), Aggregate("failed_questions", (), "count", "failed")]
    spec = counts
    if judged:
        repeats = min(len(j.repeats) for j in judged)
        repeats = repeats if repeats >= 2 else 1
        metrics = dict.fromkeys(m for j in judged for m in j.scores)
        per_judgement = [Aggregate(aggregate_key(m), (m,), "mean", repeats=repeats) for m in metrics]
        if any(j.hallucination is not None for j in judged):  # None: a rubric makes no such verdict
            per_judgement.append(Aggregate("hallucination_rate", ("hallucination",), "mean", repeats=repeats))
        flagged = ["hallucination"] if any(j.hallucination is not None for j in judged) else []
        # left out because the system gave no contexts (and so for no question): not weighed
        not_judged = {m for j in judged for m in j.details.get("not_judged", {})} - {*metrics, *flagged}
        overall = weights.overall(repeats, not_judged)
        spec = [*per_judgement, *counts, overall]
        if repeats > 1:
            spec += [Aggregate(f"{a.name}_std", a.inputs, "std", repeats=repeats, of=a.name)
                     for a in (*per_judgement, overall)]
    for metric in dict.fromkeys(m for r in results for m in r.generation):
        spec.append(Aggregate(aggregate_key(metric), (metric,), "mean", "valued"))
    retrieval = dict.fromkeys(n for r in results for n in r.retrieval)
    spec += [Aggregate(aggregate_key(n, retrieval=True), (metric_key(n),), "mean", "valued") for n in retrieval]
    spec.append(Aggregate("retrieval_excluded_questions", tuple(metric_key(n) for n in retrieval), "count", "unvalued"))
    return tuple(spec) + subset_counts(spec, results)


def count_name(aggregate: str) -> str:
    """The key of the number of questions an aggregate was computed over: `n_answer_similarity`
    (of avg_answer_similarity), `n_ndcg_at_10`, `n_overall_score`."""
    return "n_" + aggregate.removeprefix("avg_")


def subset_counts(spec: Sequence[Aggregate], results: Sequence[QuestionResult]) -> tuple[Aggregate, ...]:
    """`n_<metric>`: over how many questions each mean (and overall_score) was computed, for those
    computed over fewer than the questions that did not fail (a metric that needs a reference, over
    the questions that have one; retrieval metrics over the questions with golden documents)."""
    rows = [score_row(r) for r in results]
    not_failed = sum(row["status"] != "failed" for row in rows)
    counts = []
    for a in spec:
        if a.kind in ("mean", "overall") and not a.where:
            count = replace(a, name=count_name(a.name), kind="count", weights=(), penalty=False, repeats=1)
            if count.value(rows) != not_failed:
                counts.append(count)
    return tuple(counts)


def compute(spec: Sequence[Aggregate], results: Sequence[QuestionResult]) -> dict[str, float]:
    """The aggregates of `spec` over the results' per-question rows, rounded to 4 decimals."""
    rows = [score_row(r) for r in results]
    repeats = max((a.repeats for a in spec), default=1)
    repeat_rows = [[score_row(r, r.judgement.repeats[n] if r.judgement else None) for r in results]
                   for n in range(repeats)] if repeats > 1 else []
    values: dict[str, float] = {}
    per_repeat: dict[str, list[float]] = {}
    for a in spec:
        if a.kind in ("total", "gate"):  # not made from the questions: given by the LLM session, the gate
            continue
        if a.kind == "std":
            values[a.name] = round(statistics.stdev(per_repeat[a.of]), 4)
        elif a.repeats > 1:
            per_repeat[a.name] = [v for rows_n in repeat_rows if (v := a.value(rows_n)) is not None]
            values[a.name] = round(statistics.fmean(per_repeat[a.name]), 4)
        elif (value := a.value(rows)) is not None:
            values[a.name] = value if a.kind == "count" else round(value, 4)
    return values


def run_aggregates(results: Sequence[QuestionResult], weights: Weights, totals: dict[str, float],
                   slices: Sequence[str] = ()) -> tuple[tuple[Aggregate, ...], dict[str, float]]:
    """A run's aggregation spec and its aggregates: those of `aggregation_spec`, then the LLM
    session's `totals` (tokens, cost, requests) as they are, then the same per slice (`slice_spec`)."""
    base = aggregation_spec(results, weights)
    spec = base + tuple(Aggregate(k, (), "total", "all") for k in totals) + slice_spec(base, results, slices)
    return spec, {**compute(spec, results), **totals}


def aggregate(results: Sequence[QuestionResult], weights: Weights) -> dict[str, float]:
    """The aggregates of `aggregation_spec(results, weights)`."""
    return compute(aggregation_spec(results, weights), results)


def aggregate_scales(judge_scales: dict[str, tuple[float, float]], weights: Weights,
                     answer_metrics: Sequence[str], retrieval_metrics: Sequence[str]) -> dict[str, tuple[float, float]]:
    """The scale of each aggregate that has a known one (targets and the gate compare on it)."""
    scales = {aggregate_key(m): (lo, hi) for m, (lo, hi) in judge_scales.items()}
    scales["hallucination_rate"] = UNIT
    weighted = {(judge_scales[m][0], judge_scales[m][1]) for m in weights.weights if m in judge_scales}
    if weights.unit_scales:
        scales["overall_score"] = UNIT
    elif len(weighted) == 1 and all(m in judge_scales for m in weights.weights):
        scales["overall_score"] = weighted.pop()
    scales.update({aggregate_key(m): UNIT for m in answer_metrics})
    scales.update({aggregate_key(n, retrieval=True): UNIT for n in retrieval_metrics})
    return scales
