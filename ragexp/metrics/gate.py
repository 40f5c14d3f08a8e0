"""Quality gate (`gate=...`): thresholds on a run's aggregates; a run that misses one fails the
gate, logs `gate_passed` = 0 and makes `python -m ragexp` exit with status 3 (for CI).

Thresholds are keyed by metric name (`mrr`, `hit_rate@5` or `hit_rate_at_5`, `faithfulness`,
`overall_score`, any aggregate): `{min: X}` and/or `{max: X}`. A name is looked up as an
aggregate key, then as `avg_<name>` (judge and answer metrics are averaged per question).
`scale: [lo, hi]` says the threshold is written on that scale; when the run reports the
metric on another (known) scale, the threshold is mapped linearly onto it: the specification's
`faithfulness >= 0.9` on 0-1 becomes `avg_faithfulness >= 9.1` for the offline judge, whose
1-10 faithfulness is 1 + 9 * (share of supported answer sentences)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Collection, Iterable, Mapping, cast

from annotated_types import Len
from typing_extensions import TypedDict

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

    def keys(self) -> tuple[str, str]:
        return self.metric.key, f"avg_{self.metric.key}"

    def on_scale(self, bound: float, scale: tuple[float, float] | None) -> float:
        if self.scale is None or scale is None or tuple(scale) == self.scale:
            return bound
        (lo, hi), (to_lo, to_hi) = self.scale, scale
        return round(to_lo + (bound - lo) / (hi - lo) * (to_hi - to_lo), 10)


class ThresholdSpec(TypedDict, total=False):
    """One entry of `gate.thresholds`: `{min: X}`, `{max: X}` or both, optionally `scale: [lo, hi]`."""

    min: float | None
    max: float | None
    scale: Annotated[list[float], Len(2, 2)] | None


def parse_threshold(name: str, spec: ThresholdSpec) -> Threshold:
    """A checked threshold entry (see `Gate.constraints`) as a Threshold."""
    scale = spec.get("scale")
    return Threshold(MetricName.parse(name), spec.get("min"), spec.get("max"),
                     cast(tuple[float, float], tuple(scale)) if scale else None)  # Len(2, 2): checked with the config


class Gate:
    """`gate=none` (no thresholds: nothing checked, nothing logged), `gate=production` (the
    offline quality gate a release must pass), or your own thresholds."""

    def __init__(self, name: str = "none", thresholds: dict[str, ThresholdSpec] | None = None):
        self.name = name
        self.thresholds = [parse_threshold(str(k), v) for k, v in (thresholds or {}).items()]

    @classmethod
    def constraints(cls, thresholds: Mapping | None = None, **_) -> list[str]:
        """Each threshold names a metric, has a bound and a scale low to high; run by
        ragexp.validation before any work."""
        problems = []
        for name, spec in (thresholds or {}).items():
            setting = f"thresholds.{name}"
            try:
                MetricName.parse(name, setting)
            except RagexpError as err:
                problems.append(str(err))
            unknown = sorted(set(spec) - {"min", "max", "scale"})
            if unknown or spec.get("min") is None and spec.get("max") is None:
                problems.append(f"{setting}: write {{min: X}}, {{max: X}} or both, optionally with scale: [lo, hi]"
                                + (f"; {', '.join(unknown)} is not one of them" if unknown else ""))
            scale = spec.get("scale")
            if scale and not scale[0] < scale[1]:
                problems.append(f"{setting}.scale: lowest must be below highest, got [{scale[0]:g}, {scale[1]:g}]")
        return problems

    @property
    def active(self) -> bool:
        return bool(self.thresholds)

    def retrieval_metrics(self) -> list[str]:
        """The retrieval metrics the gate checks: the run must compute them."""
        return [str(t.metric) for t in self.thresholds if is_retrieval_metric(str(t.metric))]

    def check(self, produced: Iterable[str], scales: Mapping[str, tuple[float, float]], judge: str = "") -> None:
        """Before any work: every threshold names a metric the run produces (aggregate keys),
        and a threshold written on a scale can be mapped onto the metric's."""
        produced = set(produced)
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

    def evaluate(self, aggregates: Mapping[str, float], scales: Mapping[str, tuple[float, float]],
                 constructed: Collection[str] = ()) -> GateVerdict:
        """Each threshold checked; a check on an aggregate in `constructed` (it holds by construction
        for the run's configuration, see ragexp.metrics.scoring.by_construction) says so: it passes or fails
        as written, but it tests the configuration, not the system."""
        checks, passed = [], True
        for t in self.thresholds:
            key = next((k for k in t.keys() if k in aggregates), None)
            if key is None:  # e.g. no question was judged: the specification's results.get(metric, 0) fails
                passed = False
                checks.append(f"{t.metric}: not computed in this run: FAILED")
                continue
            value = float(aggregates[key])
            for op, bound in ((">=", t.min), ("<=", t.max)):
                if bound is None:
                    continue
                mapped = t.on_scale(bound, scales.get(key))
                ok = value >= mapped if op == ">=" else value <= mapped
                passed &= ok
                note = (f" ({bound:g} on the {t.scale[0]:g}-{t.scale[1]:g} scale)" if mapped != bound and t.scale else "")
                constructed_note = " (holds by construction)" if key in constructed else ""
                checks.append(f"{key} = {value:.4f} {op} {mapped:.4g}{note}{constructed_note}: {'ok' if ok else 'FAILED'}")
        return GateVerdict(self.name, passed, tuple(checks))
