"""The level each round tests at so that the whole race, not each round, keeps its error rate at alpha.

A race looks at the same comparisons again after every round but the last, on nested samples: round
r's questions are among round r+1's. Under the null of the paired permutation test (per question,
the sign of the two configurations' difference is a fair coin), the sum of the differences over a
round's questions is a random walk in the questions, so the standardised statistics of the rounds
are, to the normal approximation, jointly normal with correlation sqrt(n_i / n_j) between rounds of
n_i <= n_j questions (group-sequential designs: Pocock 1977; Jennison & Turnbull 2000).

`round_level` is the one nominal level L every dropping round's Holm procedure is held to (a
Pocock-type boundary: the same in every round). Holm rejects a true null only when its p-value is
at most L / m0, m0 the true nulls it tests; until the first wrong drop every configuration as good
as the best is still raced, so m0 cannot shrink between rounds. L is therefore chosen so that, for
every m0 from 1 to the number of comparisons, one comparison's sequence of p-values falls to L / m0 in
ANY round with chance at most alpha / m0: over the m0 of them, at most alpha for the race. The
chances are those of the normal random walk, simulated (seeded: the same rounds give the same L)."""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

PATHS = 400_000
SEED = 20021


@lru_cache(maxsize=16)
def largest_z(sizes: tuple[int, ...]) -> np.ndarray:
    """Per simulated null race, the largest |Z| over the rounds of `sizes` questions (seeded)."""
    n = np.asarray(sizes, dtype=float)
    rng = np.random.default_rng(SEED)
    steps = rng.standard_normal((PATHS, len(n)), dtype=np.float32) * np.sqrt(np.diff(n, prepend=0.0)).astype(np.float32)
    return np.abs(np.cumsum(steps, axis=1) / np.sqrt(n).astype(np.float32)).max(axis=1)


@lru_cache(maxsize=64)
def round_level(sizes: tuple[int, ...], alpha: float, comparisons: int = 1) -> float:
    """The nominal two-sided level of the rounds of `sizes` questions (the rounds that drop: all but
    the last) for a race-wide error rate alpha with up to `comparisons` tests per round."""
    if len(sizes) <= 1:
        return alpha
    largest = largest_z(tuple(sizes))
    levels = []
    for m in range(1, max(1, comparisons) + 1):
        bound = float(np.quantile(largest, 1.0 - alpha / m))  # P(max |Z| > bound) = alpha / m
        levels.append(m * math.erfc(bound / math.sqrt(2.0)))  # Holm's level whose L / m is that bound's p-value
    return float(min(levels))


@lru_cache(maxsize=64)
def any_round_rate(sizes: tuple[int, ...], level: float) -> float:
    """The chance that one comparison of two equally good configurations falls below `level` in at
    least one of the rounds of `sizes` questions (the normal random walk above): what testing every
    round at `level` (control=round) allows a configuration as good as the best, compared alone,
    over the whole race."""
    if not sizes:
        return 0.0
    return float(np.mean(largest_z(tuple(sizes)) > math.sqrt(2.0) * _erfc_inverse(level)))


def _erfc_inverse(p: float) -> float:
    """x with erfc(x) = p (bisection: erfc is decreasing)."""
    low, high = 0.0, 10.0
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if math.erfc(middle) > p else (low, middle)
    return (low + high) / 2
