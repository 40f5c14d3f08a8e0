"""Resampling statistics over questions: bootstrap CIs, paired permutation tests, Holm.

A statistic is a function of the column means of a per-question matrix X (questions x
columns): `fn(means) -> value`, vectorised over rows of `means` (resamples x columns). A plain
mean is `lambda m: m[:, 0]`; the run's overall score is the weighted sum of metric means times
(1 - mean hallucination). Resampling only changes which questions the means are taken over,
so every resample is one matrix product: weights (resamples x questions) @ X.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterator

import numpy as np

Statistic = Callable[[np.ndarray], np.ndarray]
BLOCK = 2000  # resamples per matrix product: bounds memory at BLOCK x questions


def mean_of(column: int = 0) -> Statistic:
    return lambda means: means[:, column]


def _blocks(resamples: int) -> Iterator[int]:
    for start in range(0, resamples, BLOCK):
        yield min(BLOCK, resamples - start)


def bootstrap_weights(rng: np.random.Generator, size: int, n: int) -> np.ndarray:
    """`size` bootstrap resamples of n questions, as counts (how often each question is drawn)."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=size).astype(float)


KEPT_WEIGHTS = 4_000_000  # resamples x questions up to which bootstrap_ci keeps its weights (32 MB)


def resample_weights(seed: int, resamples: int, n: int) -> list[np.ndarray]:
    """The weight blocks of `resamples` bootstrap resamples of n questions from `seed`: the same for
    every metric of every run with n questions, so a leaderboard draws them once (kept while they
    are small) instead of once per metric and run."""
    if resamples * n <= KEPT_WEIGHTS:
        return _kept_weights(seed, resamples, n)
    rng = np.random.default_rng(seed)
    return [bootstrap_weights(rng, size, n) for size in _blocks(resamples)]


@lru_cache(maxsize=2)
def _kept_weights(seed: int, resamples: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    blocks = [bootstrap_weights(rng, size, n) for size in _blocks(resamples)]
    for block in blocks:
        block.flags.writeable = False
    return blocks


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def percentile_interval(estimate: float, samples: np.ndarray, level: float) -> Interval:
    tail = (1.0 - level) / 2 * 100
    percentile = np.nanpercentile if np.isnan(samples).any() else np.percentile  # the same without NaN, faster
    low, high = percentile(samples, [tail, 100 - tail])
    return Interval(float(estimate), float(low), float(high))


def bootstrap_ci(x: np.ndarray, statistic: Statistic = mean_of(), resamples: int = 10_000, seed: int = 0,
                 level: float = 0.95) -> Interval:
    """Percentile bootstrap CI of `statistic` over the rows (questions) of x."""
    x = np.asarray(x, dtype=float).reshape(len(x), -1)
    n = len(x)
    estimate = float(statistic(x.mean(axis=0, keepdims=True))[0])
    if n < 2:
        return Interval(estimate, estimate, estimate)
    samples = np.concatenate([statistic(w @ x / n) for w in resample_weights(seed, resamples, n)])
    return percentile_interval(estimate, samples, level)


@dataclass(frozen=True)
class PairedTest:
    """statistic(a) - statistic(b) on the same questions: the difference with its paired bootstrap
    CI, and the two-sided p-value of a paired permutation test (swap a and b per question)."""

    difference: Interval
    p_value: float
    n: int


def paired_test(a: np.ndarray, b: np.ndarray, statistic: Statistic = mean_of(), resamples: int = 10_000,
                seed: int = 0, level: float = 0.95) -> PairedTest:
    """a, b: questions x columns, row i of both for the same question."""
    a = np.asarray(a, dtype=float).reshape(len(a), -1)
    b = np.asarray(b, dtype=float).reshape(len(b), -1)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in shape: {a.shape} vs {b.shape}")
    n = len(a)
    observed = float(statistic(a.mean(0, keepdims=True))[0] - statistic(b.mean(0, keepdims=True))[0])
    if n == 0:
        return PairedTest(Interval(float("nan"), float("nan"), float("nan")), float("nan"), 0)
    rng = np.random.default_rng(seed)
    boot, extreme = [], 0
    sum_a, sum_b, delta = a.sum(0), b.sum(0), b - a
    tolerance = 1e-9 * max(1.0, abs(observed))
    for size in _blocks(resamples):
        w = bootstrap_weights(rng, size, n)
        boot.append(statistic(w @ a / n) - statistic(w @ b / n))
        swap = rng.integers(0, 2, size=(size, n)).astype(float)  # 1 = this question's a and b swapped
        moved = swap @ delta
        permuted = statistic((sum_a + moved) / n) - statistic((sum_b - moved) / n)
        extreme += int(np.sum(np.abs(permuted) >= abs(observed) - tolerance))
    p_value = (extreme + 1) / (resamples + 1)
    return PairedTest(percentile_interval(observed, np.concatenate(boot), level), min(1.0, p_value), n)


def holm(p_values: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down), in the input order; NaN stays NaN."""
    p = np.asarray(p_values, dtype=float)
    valid = np.flatnonzero(~np.isnan(p))
    adjusted = np.full(len(p), np.nan)
    order = valid[np.argsort(p[valid], kind="stable")]
    m, running = len(order), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[index]))
        adjusted[index] = running
    return adjusted.tolist()
