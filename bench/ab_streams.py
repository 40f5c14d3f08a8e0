"""The monitor's online A/B test on simulated streams (part of figure group `decisions`).

Each stream is 30 daily windows of a control A and a variant B, drawn window by window as the
monitor summarises them (counts of 0/1 outcomes, latency moments, judged scores) and read by the
monitor's own comparison (`ragexp.monitor.ab.ABTest`) after every window, as a team reading the
report every morning would:

- A/A (no effect): the share of streams with any wrong "better" or "worse" in 30 windows, per
  metric (each tested alone at alpha 0.05) and across the report's 4 metrics with its correction;
  beside it, today's fixed-ratio alert rules applied to each window (drop 10%, errors 2x and at
  least 1%) and a naive two-sided z-test on the records so far, at 5%, every day.
- Power: planted effects of 0.02, 0.05 and 0.1 on a 0-1 metric (base rate 0.8); at the numbers of
  records where the planner (`ragexp.stats.sequential.power`, the test's Gaussian limit) promises
  30%, 50% and 80%, the share of streams the test has decided by then, and the median records to a
  decision."""
from __future__ import annotations

import math
import time

import numpy as np

WINDOWS, STREAMS, ALPHA = 30, 1000, 0.05
TRAFFIC = 2000  # records per variant per day
FEEDBACK, SATISFIED, ERRORS = 0.3, 0.85, 0.01
JUDGED = 20  # judged records per variant per day
POWER_BASE, POWER_PER_WINDOW, POWER_STREAMS = 0.8, 100, 1000


def aa_stream(rng: np.random.Generator):
    """One A/A stream: per window and side, what the monitor's windows hold for the 4 metrics."""
    from ragexp.stats.sequential import Moments

    windows = []
    for _ in range(WINDOWS):
        per = {}
        for side in "AB":
            errors = int(rng.binomial(TRAFFIC, ERRORS))
            feedback = int(rng.binomial(TRAFFIC - errors, FEEDBACK))
            latency = rng.lognormal(math.log(800), 0.45, TRAFFIC - errors)
            judged = np.clip(np.rint(rng.normal(7.5, 2.0, JUDGED)), 1, 10)
            per[side] = {"error_rate": (Moments.rate(errors, TRAFFIC), True),
                         "latency_mean_ms": (Moments.of(latency), False),
                         "satisfaction_rate": (Moments.rate(int(rng.binomial(feedback, SATISFIED)), feedback), True),
                         "avg_faithfulness": (Moments.of(judged), False)}
        windows.append(per)
    return windows


def fixed_ratio_fires(windows, metric: str) -> bool:
    """Today's alert rules on each window's own values, the control's as the baseline."""
    for per in windows:
        a, b = per["A"][metric][0].mean, per["B"][metric][0].mean
        if metric == "error_rate" and b > 2 * a and b >= 0.01:
            return True
        if metric in ("satisfaction_rate", "avg_faithfulness") and b < a * 0.9:
            return True
        if metric == "latency_mean_ms" and b > a * 1.1:  # a drop rule's mirror for latency
            return True
    return False


def naive_fires(windows, metric: str) -> bool:
    from ragexp.stats.sequential import Moments

    a = b = Moments()
    for per in windows:
        (ma, rate), (mb, _) = per["A"][metric], per["B"][metric]
        a, b = a + ma, b + mb
        se = math.sqrt(a.variance(rate) / a.n + b.variance(rate) / b.n)
        if se and abs(b.mean - a.mean) > 1.96 * se:
            return True
    return False


def aa_figures(seed: int = 1) -> dict:
    from ragexp.monitor.ab import ABSettings, ABTest

    rng = np.random.default_rng(seed)
    settings = ABSettings("A", None, ALPHA, None, WINDOWS, None, ())
    metrics = ("error_rate", "latency_mean_ms", "satisfaction_rate", "avg_faithfulness")
    alone = dict.fromkeys(metrics, 0)
    together = 0
    fixed = dict.fromkeys(metrics, 0)
    naive = dict.fromkeys(metrics, 0)
    fixed_any = naive_any = 0
    started = time.perf_counter()
    for _ in range(STREAMS):
        windows = aa_stream(rng)
        test = ABTest(settings)
        for w, per in enumerate(windows):
            test.add(str(w), str(w + 1), per)
        wrong_any = False
        for metric in metrics:
            alone[metric] += test.compare("B", metric, ALPHA, plan=False)["decision"] != "no decision yet"
            wrong_any |= test.compare("B", metric, ALPHA / len(metrics), plan=False)["decision"] != "no decision yet"
            f, n = fixed_ratio_fires(windows, metric), naive_fires(windows, metric)
            fixed[metric] += f
            naive[metric] += n
        together += wrong_any
        fixed_any += any(fixed_ratio_fires(windows, m) for m in metrics)
        naive_any += any(naive_fires(windows, m) for m in metrics)

    def share(count: int) -> float:
        return round(count / STREAMS, 4)

    return {"streams": STREAMS, "windows": WINDOWS, "traffic_per_variant_per_day": TRAFFIC, "judged_per_day": JUDGED,
            "sequential_alone": {m: share(c) for m, c in alone.items()}, "sequential_all_corrected": share(together),
            "fixed_ratio": {m: share(c) for m, c in fixed.items()}, "fixed_ratio_any": share(fixed_any),
            "naive_daily": {m: share(c) for m, c in naive.items()}, "naive_daily_any": share(naive_any),
            "seconds": round(time.perf_counter() - started, 1)}


def power_figures(seed: int = 2) -> list[dict]:
    from ragexp.monitor.ab import ABSettings, ABTest
    from ragexp.stats.sequential import Moments, power

    rng = np.random.default_rng(seed)
    settings = ABSettings("A", None, ALPHA, None, WINDOWS, None, ())
    n, p = POWER_PER_WINDOW, POWER_BASE
    rows = []
    for effect in (0.02, 0.05, 0.1):
        sd = (math.sqrt(p * (1 - p)), math.sqrt((p + effect) * (1 - p - effect)))
        horizon = 600
        promised = power(effect, sd, (n, n), horizon, ALPHA, (WINDOWS * n, WINDOWS * n), draws=8000, seed=seed)
        targets = {goal: int(np.flatnonzero(promised >= goal)[0]) + 1 for goal in (0.3, 0.5, 0.8)}
        last = max(targets.values()) * 2
        decided_at = []
        for _ in range(POWER_STREAMS):
            test = ABTest(settings)
            for w in range(last):
                test.add(str(w), str(w + 1), {side: {"m": (Moments.rate(int(rng.binomial(n, p + d)), n), True)}
                                              for side, d in (("A", 0.0), ("B", effect))})
            result = test.compare("B", "m", ALPHA, plan=False)
            decided_at.append(None if result["decided_at"] is None else int(result["decided_at"]) + 1)
            assert result["decided_at"] is None or result["decision"] == "better"
        for windows in targets.values():
            observed = float(np.mean([d is not None and d <= windows for d in decided_at]))
            rows.append({"effect": effect, "records_per_variant": windows * n, "promised": round(float(promised[windows - 1]), 3),
                         "observed": round(observed, 3), "gap_points": round(100 * (observed - float(promised[windows - 1])), 1)})
        ordered = sorted(math.inf if d is None else d for d in decided_at)  # undecided: later than any
        middle = ordered[len(ordered) // 2]
        rows[-1]["median_records_to_decision"] = int(middle * n) if math.isfinite(middle) else None
    return rows


def measure() -> dict:
    return {"aa": aa_figures(), "power": power_figures()}


def page_lines(f: dict) -> list[str]:
    aa, rows = f["aa"], f["power"]
    metrics = list(aa["sequential_alone"])
    lines = ["## The monitor's A/B test on simulated streams", "",
             f"bench/ab_streams.py: {aa['streams']} A/A streams of {aa['windows']} daily windows, {aa['traffic_per_variant_per_day']} "
             f"records per variant a day (1% errors, log-normal latency, feedback on 30%, 85% satisfied, "
             f"{aa['judged_per_day']} judged per variant a day), read after every window "
             f"({aa['seconds']} s).", "",
             "Share of A/A streams with any wrong decision or alert over 30 windows (goal for the sequential test: <= 5%):", "",
             "| metric | sequential, alone (alpha 0.05) | fixed-ratio rules, each window | naive z-test every day |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {m} | {aa['sequential_alone'][m]:.1%} | {aa['fixed_ratio'][m]:.1%} | {aa['naive_daily'][m]:.1%} |"
              for m in metrics]
    lines += [f"| any of the 4 | {aa['sequential_all_corrected']:.1%} (each at 0.05 / 4, Bonferroni) | "
              f"{aa['fixed_ratio_any']:.1%} | {aa['naive_daily_any']:.1%} |", "",
              f"Power: a 0-1 metric at {POWER_BASE}, {POWER_PER_WINDOW} records per variant a window, "
              f"{POWER_STREAMS} streams per effect; the planner's promise (the test's Gaussian limit) against the "
              "share of streams decided (goal: within +-5 points):", "",
              "| effect | records per variant | promised | observed | gap (points) | median records to a decision |",
              "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['effect']} | {r['records_per_variant']} | {r['promised']:.1%} | {r['observed']:.1%} | {r['gap_points']:+.1f} | "
              f"{r.get('median_records_to_decision', '') or ''} |" for r in rows]
    return lines + [""]


if __name__ == "__main__":
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    figures = measure()
    print(json.dumps(figures, indent=2))
    print("\n".join(page_lines(figures)))
