"""How many questions a paired comparison needs: the one-sided paired t-test of the gate's
regression check (ragexp.metrics.regression), planned from a run's per-question scores.

A change of the system moves each question's score by the drop delta plus noise; the spread of
the per-question differences is what the test sees. From one run it is estimated as
sqrt(2 (1 - rho)) * sd(scores) (rho: how far two configurations' scores of a question go
together; 0, the default, assumes nothing and is the most cautious), plus the judge's own noise
on each side (2 * its variance per question, from judge repeats) where known.

    questions(delta) = the least n with  t(1 - alpha, n - 1) + t(power, n - 1) <= delta * sqrt(n) / sd_d
    detectable(n)    = (t(1 - alpha, n - 1) + t(power, n - 1)) * sd_d / sqrt(n)"""
from __future__ import annotations

import math

from scipy.special import ndtri, stdtrit  # the normal's and Student's t's quantiles (scipy.stats' ppf, lighter to import)


def difference_spread(score_sd: float, correlation: float = 0.0, judge_sd: float = 0.0) -> float:
    """The spread of per-question differences between two runs, from one run's score spread."""
    return math.sqrt(2 * (1 - correlation) * score_sd ** 2 + 2 * judge_sd ** 2)


def detectable(n: int, spread: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The drop `n` paired questions detect with `power` at one-sided `alpha`."""
    if n < 2:
        return math.inf
    return float((stdtrit(n - 1, 1 - alpha) + stdtrit(n - 1, power)) * spread / math.sqrt(n))


def detectable_from_interval(low: float, high: float, level: float = 0.95, alpha: float = 0.05,
                             power: float = 0.8) -> float:
    """The difference a two-sided test at `alpha` detects with `power`, from the `level` interval
    of the difference already measured (its half-width is z(level) standard errors; normal
    approximation): what a comparison of those questions can tell from no difference."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return math.nan
    error = (high - low) / 2 / ndtri(0.5 + level / 2)
    return float((ndtri(1 - alpha / 2) + ndtri(power)) * error)


def questions(delta: float, spread: float, alpha: float = 0.05, power: float = 0.8, most: int = 10_000_000) -> int | None:
    """The fewest paired questions that detect a drop of `delta` (None: more than `most`)."""
    if delta <= 0:
        raise ValueError("the drop to detect must be above 0")
    if spread == 0:
        return 2
    low, high = 2, 2
    while detectable(high, spread, alpha, power) > delta:
        if high >= most:
            return None
        low, high = high, min(most, high * 2)
    while low < high:  # the least n whose detectable drop is at most delta
        middle = (low + high) // 2
        if detectable(middle, spread, alpha, power) <= delta:
            high = middle
        else:
            low = middle + 1
    return high
