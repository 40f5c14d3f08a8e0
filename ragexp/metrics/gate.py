"""Quality gate (`gate=...`): thresholds on a run's aggregates; a run that misses one fails the
gate, logs `gate_passed` = 0 and makes `python -m ragexp` exit with status 3 (for CI).

Thresholds are keyed by metric name (`mrr`, `hit_rate@5` or `hit_rate_at_5`, `faithfulness`,
`overall_score`, any aggregate): `{min: X}` and/or `{max: X}`. A name is looked up as an
aggregate key, then as `avg_<name>` (judge and answer metrics are averaged per question).
`scale: [lo, hi]` says the threshold is written on that scale; when the run reports the
metric on another (known) scale, the threshold is mapped linearly onto it: the specification's
`faithfulness >= 0.9` on 0-1 becomes `avg_faithfulness >= 9.1` for the offline judge, whose
1-10 faithfulness is 1 + 9 * (share of supported answer sentences).

A threshold on a metric the data gives nothing to compute (retrieval metrics without golden
documents: recorded outputs, a function's answers) does not apply to the run: its line says so
and why, and the gate decides on the rest; `required: true` on the threshold fails the gate
instead. A metric the run could have computed but did not (nothing judged, no contexts given to
judge on) fails: the gate cannot tell, so it does not pass."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Collection, Iterable, Mapping, cast

from annotated_types import Interval, Len
from typing_extensions import TypedDict

from ragexp.base.settings import NonNegativeFloat
from ragexp.errors import RagexpError
from ragexp.base.names import MetricName
from ragexp.metrics.retrieval import is_retrieval_metric
from ragexp.types import GateVerdict


@dataclass(frozen=True)
class Threshold:
    metric: MetricName
    min: float | None = None
    max: float | None = None
    scale: tuple[float, float] | None = None
    required: bool = False  # a run whose data cannot give the metric fails, instead of leaving the threshold out

    def keys(self) -> tuple[str, str]:
        return self.metric.key, f"avg_{self.metric.key}"

    def on_scale(self, bound: float, scale: tuple[float, float] | None) -> float:
        if self.scale is None or scale is None or tuple(scale) == self.scale:
            return bound
        (lo, hi), (to_lo, to_hi) = self.scale, scale
        return round(to_lo + (bound - lo) / (hi - lo) * (to_hi - to_lo), 10)


class ThresholdSpec(TypedDict, total=False):
    """One entry of `gate.thresholds`: `{min: X}`, `{max: X}` or both, optionally `scale: [lo, hi]`
    and `required: true`."""

    min: float | None
    max: float | None
    scale: Annotated[list[float], Len(2, 2)] | None
    required: bool


def parse_threshold(name: str, spec: ThresholdSpec) -> Threshold:
    """A checked threshold entry (see `Gate.constraints`) as a Threshold."""
    scale = spec.get("scale")
    return Threshold(MetricName.parse(name), spec.get("min"), spec.get("max"),
                     cast(tuple[float, float], tuple(scale)) if scale else None,  # Len(2, 2): checked with the config
                     bool(spec.get("required", False)))


class Gate:
    """`gate=none` (no thresholds: nothing checked, nothing logged), `gate=production` (the
    offline quality gate a release must pass), or your own thresholds. Any of them with
    `baseline` (a run folder or an MLflow run id) also fails when this run is significantly worse
    than that run (ragexp.metrics.regression): on `regression`'s metrics (null: the judge's, and
    hallucination), by more than `margin` (on each metric's own scale: a number for all, or
    metric -> number), one-sided at `alpha`, Holm-corrected across the metrics; with no margin
    for a metric, questions too few to detect a drop of a tenth of its scale fail the check
    ("too few questions to tell") unless `accept_low_power`."""

    def __init__(self, name: str, thresholds: dict[str, ThresholdSpec] | None,
                 baseline: str | None, margin: NonNegativeFloat | dict[str, NonNegativeFloat],
                 alpha: Annotated[float, Interval(gt=0, lt=1)], regression: list[str] | None,
                 accept_low_power: bool):
        self.name = name
        self.thresholds = [parse_threshold(str(k), v) for k, v in (thresholds or {}).items()]
        self.baseline, self.alpha, self.regression = baseline, float(alpha), list(regression) if regression else None
        self.accept_low_power = bool(accept_low_power)
        self.margins = {str(k): float(v) for k, v in margin.items()} if isinstance(margin, Mapping) else {"*": float(margin)}
        self._base: Any = None  # the baseline's per-question table (a DataFrame), read by `check`

    @classmethod
    def constraints(cls, thresholds: Mapping | None = None, baseline: str | None = None, **_) -> list[str]:
        """Each threshold names a metric, has a bound and a scale low to high; a baseline is a run
        folder or an MLflow run id; run by ragexp.validation before any work."""
        import re
        from pathlib import Path

        problems = []
        if baseline is not None and not Path(str(baseline)).is_dir() and not re.fullmatch(r"[0-9a-f]{32}", str(baseline)):
            problems.append(f"baseline: {baseline!r} is neither a run folder nor an MLflow run id (32 hex digits)")
        for name, spec in (thresholds or {}).items():
            setting = f"thresholds.{name}"
            try:
                MetricName.parse(name, setting)
            except RagexpError as err:
                problems.append(str(err))
            unknown = sorted(set(spec) - {"min", "max", "scale", "required"})
            if unknown or spec.get("min") is None and spec.get("max") is None:
                problems.append(f"{setting}: write {{min: X}}, {{max: X}} or both, optionally with scale: [lo, hi] "
                                "and required: true"
                                + (f"; {', '.join(unknown)} is not one of them" if unknown else ""))
            scale = spec.get("scale")
            if scale and not scale[0] < scale[1]:
                problems.append(f"{setting}.scale: lowest must be below highest, got [{scale[0]:g}, {scale[1]:g}]")
        return problems

    @property
    def active(self) -> bool:
        return bool(self.thresholds) or self.baseline is not None

    def retrieval_metrics(self) -> list[str]:
        """The retrieval metrics the gate checks: the run must compute them."""
        return [str(t.metric) for t in self.thresholds if is_retrieval_metric(str(t.metric))]

    def check(self, produced: Iterable[str], scales: Mapping[str, tuple[float, float]], judge: str = "") -> None:
        """Before any work: every threshold names a metric the run produces (aggregate keys),
        and a threshold written on a scale can be mapped onto the metric's."""
        produced = set(produced)
        if self.baseline is not None:  # read before any work: a baseline that cannot be read stops the run first
            from ragexp.metrics.regression import baseline_table
            from ragexp.store.question_tables import NOT_SCORES

            self._base = base = baseline_table(self.baseline)
            missing = [m for m in self.regression or () if m not in base.columns]
            if missing:
                raise RagexpError(f"gate.regression: the baseline {self.baseline} has no per-question {missing[0]} "
                                  f"(it has {', '.join(c for c in base.columns if c not in NOT_SCORES)})")
            self.check_margins(scales)
        for t in self.thresholds:
            found = [k for k in t.keys() if k in produced]
            if not found:
                raise RagexpError(
                    f"gate.thresholds.{t.metric.key}: this run does not produce {t.metric}{judge}; "
                    f"choose a judge or metrics that do, or drop the threshold: '~gate.thresholds.{t.metric.key}'")
            if t.scale is not None and found[0] not in scales:
                raise RagexpError(
                    f"gate.thresholds.{t.metric.key}.scale: the run does not say on which scale it reports "
                    f"{found[0]}, so a threshold on [{t.scale[0]:g}, {t.scale[1]:g}] cannot be mapped onto it")

    def check_margins(self, scales: Mapping[str, tuple[float, float]]) -> None:
        """A margin is on its metric's own scale: one as wide as the whole scale (or wider) tests
        nothing, and is refused with the scale."""
        for metric, margin in self.margins.items():
            judged = [k.removeprefix("avg_") for k in scales if k.startswith("avg_")] + ["hallucination"]
            named = [metric] if metric != "*" else list(self.regression or judged)
            for name in named:
                scale = scales.get(name) or scales.get(f"avg_{name}") or ((0.0, 1.0) if name == "hallucination" else None)
                if scale is not None and margin >= scale[1] - scale[0]:
                    setting = "gate.margin" if metric == "*" else f"gate.margin.{metric}"
                    raise RagexpError(f"{setting}: {margin:g} is as wide as {name}'s whole scale "
                                      f"({scale[0]:g}-{scale[1]:g}): a margin is on the metric's own scale, "
                                      f"e.g. {0.05 * (scale[1] - scale[0]):g}")

    def evaluate(self, aggregates: Mapping[str, float], scales: Mapping[str, tuple[float, float]],
                 constructed: Collection[str] = (), rows: Mapping[str, Mapping[str, float]] | None = None,
                 metrics: Iterable[str] = (), intervals: Mapping[str, tuple[float, float]] | None = None,
                 not_judged: Mapping[str, str] | None = None, not_given: Mapping[str, str] | None = None) -> GateVerdict:
        """Each threshold checked; a check on an aggregate in `constructed` (it holds by construction
        for the run's configuration, see ragexp.metrics.scoring.by_construction) says so: it passes or fails
        as written, but it tests the configuration, not the system. With a baseline, `rows` (this
        run's judged questions: id -> column -> value) are compared with it on `regression`'s
        metrics, else on `metrics` (the judge's). A threshold tests the point estimate; its line
        shows the estimate's 95% interval from `intervals` (aggregate key -> (low, high)) beside it.
        A threshold on a metric the run could not judge (`not_judged`: metric -> why, e.g. the system
        gave no contexts) fails and says why: the gate cannot tell, so it does not pass. One on a
        metric the data gives nothing to compute (`not_given`: aggregate key -> why, e.g. no question
        has golden documents) does not apply, said with why, unless the threshold is `required`.
        `thresholds_passed` is what a sweep's correction across its jobs does not decide again: the
        thresholds, and whether the regression check's questions could tell (or that was accepted)."""
        checks: list[str] = []
        passed, regression, told = True, dict[str, float](), True
        if self.baseline is not None:
            passed, checks, regression, told = self.regression_checks(rows or {}, list(metrics), scales)
        thresholds_passed = told
        for t in self.thresholds:
            key = next((k for k in t.keys() if k in aggregates), None)
            if key is None:  # e.g. no question was judged: the specification's results.get(metric, 0) fails
                name = "hallucination" if t.metric.key == "hallucination_rate" else t.metric.key
                why, absent = (not_judged or {}).get(name), (not_given or {}).get(t.metric.key)
                if absent and not t.required:
                    checks.append(f"{t.metric}: not applicable ({absent}; required: true makes it fail): left out")
                    continue
                passed = thresholds_passed = False
                checks.append(f"{t.metric}: not judged in this run ({why}): FAILED" if why
                              else f"{t.metric}: not computed in this run ({absent}), and the gate requires it: FAILED"
                              if absent else f"{t.metric}: not computed in this run: FAILED")
                continue
            value = float(aggregates[key])
            for op, bound in ((">=", t.min), ("<=", t.max)):
                if bound is None:
                    continue
                mapped = t.on_scale(bound, scales.get(key))
                ok = value >= mapped if op == ">=" else value <= mapped
                passed &= ok
                thresholds_passed &= ok
                note = (f" ({bound:g} on the {t.scale[0]:g}-{t.scale[1]:g} scale)" if mapped != bound and t.scale else "")
                constructed_note = " (holds by construction)" if key in constructed else ""
                ci = (intervals or {}).get(key)
                shown = f" [95% CI {ci[0]:.4f}, {ci[1]:.4f}]" if ci else ""
                checks.append(f"{key} = {value:.4f}{shown} {op} {mapped:.4g}{note}{constructed_note}: "
                              f"{'ok' if ok else 'FAILED'}")
        return GateVerdict(self.name, passed, tuple(checks), regression, thresholds_passed)

    def regression_checks(self, rows: Mapping[str, Mapping[str, float]], metrics: list[str],
                          scales: Mapping[str, tuple[float, float]]) -> tuple[bool, list[str], dict[str, float], bool]:
        """(passed, its lines, each metric's raw p-value, whether its questions could tell)."""
        from ragexp.metrics.regression import baseline_table, failed, paired_with

        base = self._base if self._base is not None else baseline_table(str(self.baseline))
        shared, found = paired_with(rows, base, str(self.baseline), self.regression or metrics, self.margins,
                                    self.alpha, scales)
        lines = [f"regression against {self.baseline}: {shared} shared questions, paired, one-sided at "
                 f"alpha {self.alpha:g}, Holm across {len(found)} metrics"]
        lines += [r.line(self.alpha, 0.95, self.accept_low_power) for r in found]
        told = self.accept_low_power or not any(r.too_few for r in found)
        if not told:
            lines.append("too few questions to tell: give a margin you can detect (gate.margin, on each metric's own "
                         "scale), judge more questions (python -m ragexp.plan says how many), or accept it: "
                         "gate.accept_low_power=true")
        return not failed(found, self.alpha, self.accept_low_power), lines, {r.metric: r.p for r in found}, told


def threshold_intervals(gate: Gate, spec, rows: list[Mapping]) -> dict[str, tuple[float, float]]:
    """The 95% bootstrap interval (as the leaderboard's) of each thresholded aggregate that is the
    mean of a per-question column (`spec`: the run's Aggregates; `rows`: its score rows)."""
    import numpy as np

    from ragexp.metrics.regression import present
    from ragexp.stats.inference import bootstrap_ci

    keys = {k for t in gate.thresholds for k in t.keys()}
    found = {}
    for a in spec:
        if a.name not in keys or a.kind != "mean" or a.where or len(a.inputs) != 1:
            continue
        values = [float(row[a.inputs[0]]) for row in rows if present(row.get(a.inputs[0]))
                  and (a.rows != "judged" or row.get("status") == "judged")]
        if len(values) >= 2:
            ci = bootstrap_ci(np.asarray(values), resamples=2000)
            found[a.name] = (float(ci.low), float(ci.high))
    return found
