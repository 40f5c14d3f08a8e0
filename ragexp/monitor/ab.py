"""An online A/B test of the variants in a log (`monitor.ab`): every metric per variant per window,
and each variant against the control with an anytime-valid confidence sequence
(ragexp.stats.sequential), so the report may be read after every window, every day, without
inflating false alarms.

Per metric and variant the test reads the windows in time order and decides the first time the
interval of the difference leaves 0: **better** or **worse** (on the metric's own direction: lower
is better for errors, latency and hallucination), else **no decision yet**, with how many more
records it would likely take at the effect seen so far. The interval shown is the running
intersection of the intervals of every look (valid too, and it never widens). The chance of any
wrong decision over the whole test, every look, variant and metric together, is at most
`monitor.ab.alpha`: each of the m comparisons is run at alpha / m (Bonferroni, stated in the report).

Observations per metric: `error_rate` every record (1: failed); `latency_mean_ms` every record with
a latency; `satisfaction_rate` every record with feedback; the judge's `avg_<metric>` and
`hallucination_rate` the records judged, drawn per variant per window (`monitor.judge_sample`).
The variants' shares of records are checked against `monitor.ab.split` (sample-ratio mismatch:
a chi-square test, warned at p < 0.001)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ragexp.base.names import higher_is_worse
from ragexp.errors import RagexpError
from ragexp.stats import sequential
from ragexp.stats.sequential import MIN_RECORDS, MOST_WINDOWS, Moments, look

GUARDRAIL_SEVERITY, METRIC_SEVERITY = "CRITICAL", "HIGH"
LOWER_IS_BETTER = ("error_rate", "latency_mean_ms")
SRM_P = 0.001  # a sample-ratio mismatch is warned below this p-value
POWER = 0.8  # the chance at which "more records" is given


@dataclass(frozen=True)
class ABSettings:
    control: str
    split: dict[str, float] | None  # variant -> share; None: equal shares
    alpha: float
    since: float | None  # seconds since the epoch: the test's start
    horizon_windows: int
    metrics: tuple[str, ...] | None  # None: every metric the records have
    guardrails: tuple[str, ...]

    @classmethod
    def of(cls, ab: dict | None) -> ABSettings | None:
        """`monitor.ab` from the config; None when no control is named (no A/B test)."""
        if not ab or not ab.get("control"):
            return None
        from ragexp.monitor.values import BadValue, epoch_seconds

        alpha = ab.get("alpha", 0.05)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 0.5:
            raise RagexpError(f"monitor.ab.alpha: {alpha!r} is not a number between 0 and 0.5 (0.05: a 5% chance of "
                              "any wrong decision over the whole test)")
        split = ab.get("split")
        if split is not None:
            if not isinstance(split, dict) or not split or any(
                    isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0 for v in split.values()):
                raise RagexpError(f"monitor.ab.split: {split!r} is not a map of variant -> share > 0, "
                                  "e.g. monitor.ab.split={A:0.5,B:0.5}")
            total = sum(split.values())
            split = {str(k): float(v) / total for k, v in split.items()}
        since = ab.get("start")
        try:
            since = None if since in (None, "") else float(epoch_seconds(since))
        except BadValue as err:
            raise RagexpError(f"monitor.ab.start: {err} (the test's first moment, e.g. 2026-11-01T00:00:00)") from None
        horizon = ab.get("horizon_windows", 30)
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
            raise RagexpError(f"monitor.ab.horizon_windows: {horizon!r} is not a whole number of windows >= 1")
        metrics = ab.get("metrics")
        return cls(str(ab["control"]), split, float(alpha), since, horizon,
                   None if metrics is None else tuple(str(m) for m in metrics),
                   tuple(str(g) for g in ab.get("guardrails") or ()))


def lower_is_better(metric: str) -> bool:
    return metric in LOWER_IS_BETTER or higher_is_worse(metric)


def observations(arm, judged: list) -> dict[str, tuple[Moments, bool]]:
    """A variant's observations in one window, per metric: (moments, whether it is a rate).
    `arm` is the variant's part of the window, `judged` its judged records' judgements."""
    seen: dict[str, tuple[Moments, bool]] = {"error_rate": (Moments.rate(sum(arm.errors.values()), arm.requests), True)}
    if arm.latency_moments.n:
        seen["latency_mean_ms"] = (arm.latency_moments, False)
    if arm.feedback_count:
        seen["satisfaction_rate"] = (Moments.rate(arm.satisfied, arm.feedback_count), True)
    for metric in dict.fromkeys(m for j in judged for m in j.scores):
        seen[f"avg_{metric}"] = (Moments.of([j.scores[metric] for j in judged if metric in j.scores]), False)
    flagged = [float(j.hallucination) for j in judged if j.hallucination is not None]
    if flagged:
        seen["hallucination_rate"] = (Moments.rate(int(sum(flagged)), len(flagged)), True)
    return seen


def srm(counts: dict[str, int], split: dict[str, float] | None) -> dict:
    """The sample-ratio check: the variants' records against their configured shares."""
    from scipy.stats import chisquare

    names = sorted(counts)
    shares = split or {v: 1 / len(names) for v in names}
    expected_share = [shares.get(v, 0.0) for v in names]
    total = sum(counts.values())
    observed = [counts[v] for v in names]
    if any(s == 0 for s in expected_share) or total == 0:
        p = 0.0
    else:
        scale = sum(expected_share)
        p = float(chisquare(observed, [total * s / scale for s in expected_share]).pvalue)
    return {"records": dict(zip(names, observed)), "expected_shares": dict(zip(names, expected_share)),
            "p_value": p, "mismatch": p < SRM_P}


class ABTest:
    """The test over the windows: `add(window, variant -> observations)` in time order, then `result()`."""

    def __init__(self, settings: ABSettings):
        self.settings = settings
        self.windows: list[tuple[str, str, dict[str, dict[str, tuple[Moments, bool]]]]] = []

    def add(self, window: str, window_end: str, per_variant: dict[str, dict[str, tuple[Moments, bool]]]) -> None:
        self.windows.append((window, window_end, per_variant))

    def variants(self) -> list[str]:
        return sorted({v for _, _, per in self.windows for v in per})

    def check(self) -> None:
        """Bad input, one line: a control the log does not have, fewer than two variants."""
        s, found = self.settings, self.variants()
        if len(found) < 2:
            raise RagexpError(f"monitor.ab.control={s.control}: the log's variant column holds "
                              f"{'one variant, ' + found[0] if found else 'no variant'}; an A/B test needs two or "
                              "more (monitor.columns.variant names the column; monitor.ab.control=null turns the test off)")
        if s.control not in found:
            raise RagexpError(f"monitor.ab.control: {s.control!r} is not a variant of the log ({', '.join(found)})")
        if s.split is not None and set(s.split) != set(found):
            raise RagexpError(f"monitor.ab.split: names {', '.join(sorted(s.split))}, the log's variants are "
                              f"{', '.join(found)}")

    def metrics(self) -> list[str]:
        seen = dict.fromkeys(m for _, _, per in self.windows for obs in per.values() for m in obs)
        chosen = list(self.settings.metrics) if self.settings.metrics is not None else list(seen)
        return [m for m in chosen if m in seen]

    def result(self, counts: dict[str, int]) -> dict:
        s = self.settings
        self.check()
        others = [v for v in self.variants() if v != s.control]
        metrics = self.metrics()
        comparisons = len(others) * len(metrics)
        alpha = s.alpha / max(comparisons, 1)
        decisions = [self.compare(variant, metric, alpha) for variant in others for metric in metrics]
        return {"control": s.control, "variants": others, "alpha": s.alpha, "comparisons": comparisons,
                "alpha_each": alpha,
                "correction": f"Bonferroni: each of the {comparisons} comparisons (variants x metrics) at "
                              f"{s.alpha:g} / {comparisons} = {alpha:.4g}, so the chance of any wrong decision over "
                              f"every look, variant and metric is at most {s.alpha:g}",
                "srm": srm(counts, s.split), "decisions": decisions,
                "metrics_absent": [m for m in s.metrics or () if m not in metrics]}

    def compare(self, variant: str, metric: str, alpha: float, plan: bool = True) -> dict:
        """`variant` against the control on `metric`, each comparison at `alpha`; `plan`: also
        estimate the records an undecided comparison would likely need (a simulation)."""
        s = self.settings
        rate = False
        sums = {s.control: Moments(), variant: Moments()}
        planned: tuple[float, float] | None = None
        lower, upper = -math.inf, math.inf
        decided_at, decided_records, last, looks = None, None, None, 0
        path: list[list] = []  # per look once it can decide: [window, difference, running interval]
        for window, _, per in self.windows:
            for side in sums:
                if metric in per.get(side, {}):
                    moments, rate = per[side][metric]
                    sums[side] = sums[side] + moments
            a, b = sums[s.control], sums[variant]
            if not (a.n and b.n):
                continue
            looks += 1
            if planned is None:  # the sequence is tightest after horizon_windows windows like the first one
                planned = (s.horizon_windows * a.n, s.horizon_windows * b.n)
            last = look(a, b, alpha, planned, rate)
            if not last.ready:
                continue
            lower, upper = max(lower, last.lower), min(upper, last.upper)
            path.append([window, round(last.effect, 6), round(lower, 6), round(upper, 6)])
            if decided_at is None and (lower > 0 or upper < 0):
                decided_at, decided_records = window, int(a.n + b.n)
        worse_when_higher = lower_is_better(metric)
        decision = "no decision yet"
        if decided_at is not None:
            decision = "worse" if (lower > 0) == worse_when_higher else "better"
        entry: dict[str, Any] = {
                 "variant": variant, "metric": metric, "decision": decision, "guardrail": metric in s.guardrails,
                 "control_value": last.control if last else None, "variant_value": last.variant if last else None,
                 "effect": last.effect if last else None, "lower": lower if math.isfinite(lower) else None,
                 "upper": upper if math.isfinite(upper) else None, "decided_at": decided_at,
                 "records_at_decision": decided_records, "control_records": int(sums[s.control].n),
                 "variant_records": int(sums[variant].n), "looks": looks, "more_records": None,
                 "rate": rate, "planned_records": list(planned) if planned else None,
                 "control_sd": spread(sums[s.control], rate), "variant_sd": spread(sums[variant], rate),
                 "path": path}
        if plan and decision == "no decision yet" and last is not None and last.effect and entry["control_sd"] \
                and entry["variant_sd"]:
            seen = entry["control_records"] + entry["variant_records"]
            total = sequential.records_to_decide(abs(last.effect), (entry["control_sd"], entry["variant_sd"]),
                                                 (entry["control_records"], entry["variant_records"]), looks, alpha,
                                                 planned, POWER)
            entry["more_records"] = (max(int(total - seen), 0) if total is not None
                                     else f"more than {int(MOST_WINDOWS * seen / looks - seen)}")
        return entry


def spread(side: Moments, rate: bool) -> float | None:
    """A side's standard deviation as the test uses it (None before it has one)."""
    variance = side.variance(rate) if side.n else math.nan
    return round(math.sqrt(variance), 6) if math.isfinite(variance) else None


def alerts(result: dict, windows: list[dict]) -> list[dict]:
    """A "worse" decision as an alert, in the window where it was taken (guardrails CRITICAL)."""
    ends = {w["window"]: w["window_end"] for w in windows}
    found = []
    for d in result["decisions"]:
        if d["decision"] != "worse":
            continue
        change = (d["variant_value"] - d["control_value"]) / d["control_value"] if d["control_value"] else None
        found.append({"rule": f"ab.{d['metric']}.{d['variant']}", "metric": d["metric"], "window": d["decided_at"],
                      "window_end": ends.get(d["decided_at"]), "baseline": d["control_value"], "baseline_run": None,
                      "current": d["variant_value"], "change": None if change is None else round(change, 4),
                      "severity": GUARDRAIL_SEVERITY if d["guardrail"] else METRIC_SEVERITY,
                      "condition": f"A/B: variant {d['variant']} significantly worse than control {result['control']}, "
                                   f"difference {interval(d)}, anytime-valid",
                      "variant": d["variant"], "run_id": None})
    return found


def interval(d: dict) -> str:
    lo, hi = d["lower"], d["upper"]
    bounds = f"no interval yet (it needs {MIN_RECORDS} records a side, and some spread)" if lo is None else f"[{lo:+.4g}, {hi:+.4g}]"
    return f"{d['effect']:+.4g} {bounds}" if d["effect"] is not None else bounds


def lines(result: dict) -> list[str]:
    """The console's and the report's account of the test, a line per variant and metric."""
    srm_ = result["srm"]
    shares = ", ".join(f"{v} {n}" for v, n in srm_["records"].items())
    out = [f"A/B test against control {result['control']} (anytime-valid; {result['correction']})",
           f"records per variant: {shares}; sample-ratio check p = {srm_['p_value']:.3g}"
           + (" MISMATCH: the variants' shares differ from monitor.ab.split; check the assignment before trusting "
              "any decision" if srm_["mismatch"] else "")]
    for d in result["decisions"]:
        when = f" since {d['decided_at']}" if d["decided_at"] else ""
        more = ""
        if d["more_records"] is not None:
            count = d["more_records"] if isinstance(d["more_records"], str) else f"about {d['more_records']}"
            more = f"; {count} more records to decide (80% chance at the effect seen so far)"
        kind = " (guardrail)" if d["guardrail"] else ""
        values = "" if d["control_value"] is None else f" {d['variant_value']:.4g} vs {d['control_value']:.4g},"
        out.append(f"  {d['variant']} {d['metric']}{kind}: {d['decision'].upper() if d['decision'] != 'no decision yet' else d['decision']}"
                   f"{when};{values} difference {interval(d)}{more}")
    return out


def run(settings: ABSettings, summary, windows: list[dict], judged: list) -> dict:
    """The test over a monitor's windows (`summary.ordered_arms()`) and judged records ((window,
    variant, Sampled)); the result as written to ab.json."""
    judgements: dict[tuple[str, str], list] = {}
    for window, variant, sampled in judged:
        if sampled.judgement is not None:
            judgements.setdefault((window, variant), []).append(sampled.judgement)
    per_window: dict[int, dict] = {}
    counts: dict[str, int] = {}
    for index, variant, arm in summary.ordered_arms():
        per_window.setdefault(index, {})[variant] = observations(arm, judgements.get((windows[index]["window"], variant), []))
        counts[variant] = counts.get(variant, 0) + arm.requests
    test = ABTest(settings)
    for index in sorted(per_window):
        test.add(windows[index]["window"], windows[index]["window_end"], per_window[index])
    result = test.result(counts)
    result["unassigned_records"], result["records_before_start"] = summary.unassigned, summary.before
    return result


def notes(result: dict) -> list[str]:
    """What the report says beside the decisions: a sample-ratio mismatch, records left out."""
    said = []
    check = result["srm"]
    if check["mismatch"]:
        observed = sum(check["records"].values())
        shares = ", ".join(f"{v} {n / observed:.1%} (expected {check['expected_shares'][v]:.1%})"
                           for v, n in check["records"].items())
        said.append(f"sample-ratio mismatch (p = {check['p_value']:.2g}): {shares}; the assignment of records to "
                    "variants may be broken, so the A/B decisions may be too (monitor.ab.split sets the expected shares)")
    if result.get("metrics_absent"):
        said.append(f"monitor.ab.metrics: {', '.join(result['metrics_absent'])} not measured on these records "
                    "(no feedback, no judged sample, or a name that is not a window metric): not tested")
    if result["unassigned_records"]:
        said.append(f"{result['unassigned_records']} records carry no variant: left out of the A/B test")
    if result["records_before_start"]:
        said.append(f"{result['records_before_start']} records from before monitor.ab.start: left out of every window")
    return said
