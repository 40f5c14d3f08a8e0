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
from typing import Iterable, Mapping

from ragexp.errors import RagexpError
from ragexp.metrics.names import MetricName
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


def parse_threshold(name: str, spec) -> Threshold:
    setting = f"gate.thresholds.{name}"
    metric = MetricName.parse(name, setting)
    if not hasattr(spec, "keys") or not set(spec.keys()) <= {"min", "max", "scale"}:
        raise RagexpError(f"{setting}: write {{min: X}}, {{max: X}} or both, optionally with scale: [lo, hi]; got {spec}")
    bounds = {}
    for bound in ("min", "max"):
        value = spec.get(bound)
        if value is not None:
            try:
                bounds[bound] = float(value)
            except (TypeError, ValueError):
                raise RagexpError(f"{setting}.{bound}: {value!r} is not a number") from None
    if not bounds:
        raise RagexpError(f"{setting}: give min and/or max")
    scale = spec.get("scale")
    if scale is not None:
        try:
            lo, hi = (float(v) for v in scale)
        except (TypeError, ValueError):
            raise RagexpError(f"{setting}.scale: write [lowest, highest], got {scale}") from None
        if not lo < hi:
            raise RagexpError(f"{setting}.scale: lowest must be below highest, got [{lo:g}, {hi:g}]")
        scale = (lo, hi)
    return Threshold(metric, bounds.get("min"), bounds.get("max"), scale)


class Gate:
    """`gate=none` (no thresholds: nothing checked, nothing logged), `gate=production` (the
    specification's offline quality gate), or your own thresholds."""

    def __init__(self, name: str = "none", thresholds: Mapping | None = None):
        self.name = name
        self.thresholds = [parse_threshold(str(k), v) for k, v in (thresholds or {}).items()]

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

    def evaluate(self, aggregates: Mapping[str, float], scales: Mapping[str, tuple[float, float]]) -> GateVerdict:
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
                checks.append(f"{key} = {value:.4f} {op} {mapped:.4g}{note}: {'ok' if ok else 'FAILED'}")
        return GateVerdict(self.name, passed, tuple(checks))
