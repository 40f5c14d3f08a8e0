"""Alert rules: each window's metrics against a baseline run's (or a fixed bound). The defaults,
in `conf/monitor.yaml` under `alerts`:

- `drop`: current < baseline x (1 - limit)   (faithfulness, answer relevance, satisfaction: 0.10)
- `rise`: current > baseline x limit and current >= floor   (error rate: 2x)
- `above` / `below`: current > limit / current < limit, no baseline needed   (p95 latency)

An alert names the rule, metric, window, baseline (or bound), current value, relative change and
severity. A rule whose metric the window or the baseline lacks is skipped with a note."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from ragexp.errors import RagexpError

log = logging.getLogger(__name__)
KINDS = ("drop", "rise", "above", "below")
SEVERITIES = ("CRITICAL", "HIGH", "MEDIUM", "LOW")
REPLY_BYTES = 1_000_000  # a webhook's answer is read, not used: more than this is no webhook's


@dataclass(frozen=True)
class Rule:
    name: str
    metric: str
    kind: str
    limit: float
    severity: str = "HIGH"
    floor: float = 0.0  # `rise` only: the current value must also reach this (a baseline of 0 errors)

    @property
    def needs_baseline(self) -> bool:
        return self.kind in ("drop", "rise")

    def condition(self) -> str:
        fixed = ", a fixed ratio, not a test"  # beside an A/B test's decisions (ragexp.monitor.ab)
        return {"drop": f"{self.metric} down more than {self.limit:.0%} from the baseline{fixed}",
                "rise": f"{self.metric} above {self.limit:g}x the baseline" + (f" and >= {self.floor:g}" if self.floor else "")
                + fixed,
                "above": f"{self.metric} above {self.limit:g}", "below": f"{self.metric} below {self.limit:g}"}[self.kind]

    def fires(self, current: float, reference: float) -> bool:
        if self.kind == "drop":
            return current < reference * (1 - self.limit)
        if self.kind == "rise":
            return current > reference * self.limit and current >= self.floor
        return current > reference if self.kind == "above" else current < reference


def rules_from(config: dict | None) -> list[Rule]:
    """`alerts` from the config: name -> {metric, rule, limit, severity, floor}; null disables a rule."""
    rules = []
    for name, spec in (config or {}).items():
        if spec is None:
            continue
        setting = f"alerts.{name}"
        if not isinstance(spec, dict) or not spec.get("metric") or spec.get("rule") not in KINDS:
            raise RagexpError(f"{setting}: needs a metric and a rule ({', '.join(KINDS)}), got {spec!r}")
        unknown = set(spec) - {"metric", "rule", "limit", "severity", "floor"}
        if unknown:
            raise RagexpError(f"{setting}: unknown key(s) {', '.join(sorted(unknown))}")
        try:
            limit, floor = float(spec["limit"]), float(spec.get("floor") or 0.0)
        except (KeyError, TypeError, ValueError):
            raise RagexpError(f"{setting}.limit: a number is required, got {spec.get('limit')!r}") from None
        severity = str(spec.get("severity", "HIGH")).upper()
        if severity not in SEVERITIES:
            raise RagexpError(f"{setting}.severity: {severity!r} is not one of {', '.join(SEVERITIES)}")
        if spec["rule"] == "drop" and not 0 < limit < 1:
            raise RagexpError(f"{setting}.limit: a drop is a share between 0 and 1 (0.1 = 10%), got {limit}")
        rules.append(Rule(name, str(spec["metric"]), spec["rule"], limit, severity, floor))
    return rules


def evaluate(rules: list[Rule], windows: list[dict], baseline: dict | None) -> tuple[list[dict], list[str]]:
    """The alerts of each window (`{"window": iso start, "window_end": ..., "metrics": {...}}`)
    against `baseline` (`{"run_id", "name", "metrics"}` or None), and notes on skipped rules."""
    alerts, notes = [], []
    base = (baseline or {}).get("metrics", {})
    if baseline is None and any(rule.needs_baseline for rule in rules):
        notes.append(f"alert rules {', '.join(r.name for r in rules if r.needs_baseline)} skipped: no baseline "
                     "(set monitor.baseline=<run id or name>)")
    for rule in rules:
        if rule.needs_baseline and baseline is None:
            continue
        if rule.needs_baseline and rule.metric not in base:
            assert baseline is not None  # a rule that needs one was skipped above without it
            notes.append(f"alert rule {rule.name!r} skipped: baseline run {baseline['name']!r} has no metric {rule.metric!r}")
            continue
        missing = [w["window"] for w in windows if rule.metric not in w["metrics"]]
        if missing:
            notes.append(f"alert rule {rule.name!r}: {len(missing)} of {len(windows)} windows have no {rule.metric!r} "
                         f"(e.g. {missing[0]})")
        reference = base[rule.metric] if rule.needs_baseline else rule.limit
        for window in windows:
            current = window["metrics"].get(rule.metric)
            if current is None or not rule.fires(current, reference):
                continue
            change = round((current - reference) / reference, 4) if reference else None
            alerts.append({
                "rule": rule.name, "metric": rule.metric, "window": window["window"], "window_end": window["window_end"],
                "baseline": reference, "baseline_run": (baseline or {}).get("run_id") if rule.needs_baseline else None,
                "current": current, "change": change, "severity": rule.severity, "condition": rule.condition(),
                "run_id": window.get("run_id"),
            })
    return ordered(alerts), notes


def ordered(alerts: list[dict]) -> list[dict]:
    """Alerts by window, then severity, then rule."""
    return sorted(alerts, key=lambda a: (a["window"], SEVERITIES.index(a["severity"]), a["rule"]))


def describe(alert: dict) -> str:
    change = f" ({alert['change']:+.1%})" if alert["change"] is not None else ""
    if alert.get("variant") is not None:  # an A/B test's decision (ragexp.monitor.ab)
        return (f"{alert['severity']}: {alert['metric']} of variant {alert['variant']} = {alert['current']:g} vs control "
                f"{alert['baseline']:g}{change}, decided in window {alert['window']} ({alert['condition']})")
    against = "bound" if alert["baseline_run"] is None else "baseline"
    return (f"{alert['severity']}: {alert['metric']} = {alert['current']:g} vs {against} {alert['baseline']:g}{change} "
            f"in window {alert['window']} ({alert['condition']})")


def post(url: str, payload: dict, retries: int = 3, backoff_s: float = 1.0, timeout_s: float = 10.0) -> tuple[bool, int, str]:
    """POSTs `payload` as JSON (ragexp.base.http_deadline.post: retried on connection errors,
    timeouts, HTTP 429 and 5xx; `timeout_s` bounds each whole attempt, as `system.timeout_s` does).
    Returns (delivered, attempts, last error)."""
    from ragexp.base.http_deadline import post as post_bytes

    return post_bytes(url, json.dumps(payload).encode(), {"Content-Type": "application/json", "User-Agent": "ragexp-monitor"},
                      retries, backoff_s, timeout_s, REPLY_BYTES, "monitor.webhook_timeout_s")
