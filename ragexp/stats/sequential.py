"""Anytime-valid comparison of two means, for an A/B test read again after every window.

The difference of the variant's mean and the control's, `d = mean_B - mean_A`, estimated with
variance `v = s_A^2 / n_A + s_B^2 / n_B`, gets the normal-mixture confidence sequence

    d +- sqrt( v (1 + v / tau2) log((1 + tau2 / v) / alpha^2) )

(Robbins' normal mixture; Howard et al. 2021; the same bound as inverting the mixture sequential
probability ratio test of Johari et al. 2017, and the asymptotic confidence sequence of
Waudby-Smith et al. 2021). With probability at least `1 - alpha` it holds the true difference at
every look at once, so a decision taken the first time the interval leaves 0 keeps its error rate
however often the report is read. The bound is asymptotic (it leans on the central limit theorem,
as a t-test does): `MIN_RECORDS` observations per side come before any decision.

`tau2`, the mixture's spread, only sets when the sequence is tightest: `tau2 = c(alpha) v*`, with
`v*` the estimate's variance at a planned number of records per side (`c` as Waudby-Smith et al.
choose it). `power()` is the planner of that very test: the chance that it decides by each look,
from its Gaussian limit drawn many times."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

MIN_RECORDS = 30  # observations per side before the first decision
MOST_WINDOWS = 400  # how far ahead `records_to_decide` looks


@dataclass(frozen=True)
class Moments:
    """Count, sum and sum of squares of one side's observations: what the test needs, and what
    adds up window by window."""

    n: float = 0.0
    total: float = 0.0
    squares: float = 0.0

    @classmethod
    def of(cls, values) -> Moments:
        array = np.asarray(values, dtype=np.float64)
        return cls(float(len(array)), float(array.sum()), float(np.square(array).sum()))

    @classmethod
    def rate(cls, hits: int, count: int) -> Moments:
        """`count` observations of 0 or 1, `hits` of them 1."""
        return cls(float(count), float(hits), float(hits))

    def __add__(self, other: Moments) -> Moments:
        return Moments(self.n + other.n, self.total + other.total, self.squares + other.squares)

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else math.nan

    def variance(self, rate: bool = False) -> float:
        """The sample variance; for a rate (0/1 values) that of the add-one estimate
        (k + 1) / (n + 2), so that no side of a rare event has variance 0."""
        if rate:
            p = (self.total + 1) / (self.n + 2)
            return p * (1 - p)
        if self.n < 2:
            return math.nan
        return max(self.squares - self.total * self.total / self.n, 0.0) / (self.n - 1)


def mixture_constant(alpha: float) -> float:
    """c(alpha): the mixture spread that makes the sequence tightest at the planned look."""
    return -2 * math.log(alpha) + math.log(1 - 2 * math.log(alpha))


def half_width(variance, tau2, alpha: float):
    """The half-width of the confidence sequence for an estimate of this variance (arrays too)."""
    v = np.asarray(variance, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(v * (1 + v / tau2) * np.log((1 + tau2 / v) / alpha ** 2))


@dataclass(frozen=True)
class Look:
    """The comparison after one window: the difference and its anytime-valid interval."""

    control: float
    variant: float
    effect: float
    lower: float
    upper: float
    ready: bool  # enough observations on both sides to decide


def look(control: Moments, variant: Moments, alpha: float, planned: tuple[float, float], rate: bool = False) -> Look:
    """`planned`: the records per side (control, variant) at which the sequence is tightest."""
    va, vb = control.variance(rate), variant.variance(rate)
    ready = min(control.n, variant.n) >= MIN_RECORDS and math.isfinite(va) and math.isfinite(vb)
    effect = variant.mean - control.mean
    if not ready or va + vb <= 0:
        return Look(control.mean, variant.mean, effect, -math.inf, math.inf, False)
    v = va / control.n + vb / variant.n
    tau2 = mixture_constant(alpha) * (va / planned[0] + vb / planned[1])
    h = float(half_width(v, tau2, alpha))
    return Look(control.mean, variant.mean, effect, effect - h, effect + h, True)


def power(effect: float, sd: tuple[float, float], per_window: tuple[float, float], windows: int, alpha: float,
          planned: tuple[float, float], draws: int = 4000, seed: int = 0) -> np.ndarray:
    """The chance that the test has decided (its interval left 0, on either side) by each of the
    next `windows` looks, for a true difference `effect`, each side's standard deviation `sd` and
    `per_window` observations per side and window: the test's Gaussian limit, `draws` times."""
    rng = np.random.default_rng(seed)
    looks = np.arange(1, windows + 1, dtype=np.float64)
    counts = np.outer(looks, per_window)  # (looks, 2)
    steps = rng.standard_normal((draws, windows, 2)) * (np.asarray(sd) * np.sqrt(per_window))
    sums = np.cumsum(steps, axis=1)
    estimate = effect + sums[:, :, 1] / counts[:, 1] - sums[:, :, 0] / counts[:, 0]
    variance = sd[0] ** 2 / counts[:, 0] + sd[1] ** 2 / counts[:, 1]
    tau2 = mixture_constant(alpha) * (sd[0] ** 2 / planned[0] + sd[1] ** 2 / planned[1])
    decided = np.abs(estimate) > half_width(variance, tau2, alpha)
    decided &= (counts.min(axis=1) >= MIN_RECORDS)[None, :]
    return np.logical_or.accumulate(decided, axis=1).mean(axis=0)


def records_for_power(effect: float, sd: tuple[float, float], share: tuple[float, float], per_window: float,
                      alpha: float, planned: tuple[float, float], target: float = 0.8, most: int = MOST_WINDOWS,
                      draws: int = 2000, seed: int = 0) -> float | None:
    """The records of both sides together at which the test decides a true difference `effect`
    with chance `target`, when each window brings `per_window` records split by `share`; None
    when it does not within `most` windows."""
    if effect == 0 or not all(s > 0 for s in sd):
        return None
    sides = (per_window * share[0], per_window * share[1])
    reached = power(effect, sd, sides, most, alpha, planned, draws, seed)
    hit = np.flatnonzero(reached >= target)
    return float((hit[0] + 1) * per_window) if len(hit) else None


def records_to_decide(difference: float, sd: tuple[float | None, float | None], records: tuple[int, int], looks: int,
                      alpha: float, planned: Sequence[float] | None, power_wanted: float) -> float | None:
    """The records of both sides (from the test's start) at which a comparison that has seen
    `records` per side over `looks` windows decides a true `difference` with chance
    `power_wanted`, at that traffic and split; None without a spread on both sides or a look, or
    beyond MOST_WINDOWS windows."""
    if not sd[0] or not sd[1] or not looks or not difference or not planned or not sum(records):
        return None
    total = sum(records)
    return records_for_power(difference, (sd[0], sd[1]), (records[0] / total, records[1] / total), total / looks,
                             alpha, (planned[0], planned[1]), power_wanted)
