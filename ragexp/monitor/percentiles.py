"""Latency percentiles in bounded memory: exact (numpy on the values) while the values held for
a run fit in a budget, else a log-bucket histogram with a known relative error (a DDSketch)."""
from __future__ import annotations

import math
from array import array

import numpy as np

RELATIVE_ERROR = 0.01  # of a percentile read from the histogram


class Sketch:
    """Counts of values in buckets [g^(i-1), g^i), g = (1+a)/(1-a): any percentile is returned
    within a relative error `a` of a value of the data at that rank. Values <= 0 count as 0."""

    def __init__(self, relative_error: float = RELATIVE_ERROR):
        self.gamma = (1 + relative_error) / (1 - relative_error)
        self.log_gamma = math.log(self.gamma)
        self.buckets: dict[int, int] = {}
        self.zeros = 0

    def add_many(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float64)
        positive = values[values > 0]
        self.zeros += len(values) - len(positive)
        keys, counts = np.unique(np.ceil(np.log(positive) / self.log_gamma).astype(np.int64), return_counts=True)
        for key, count in zip(keys.tolist(), counts.tolist()):
            self.buckets[key] = self.buckets.get(key, 0) + count

    @property
    def count(self) -> int:
        return self.zeros + sum(self.buckets.values())

    def percentile(self, q: float) -> float:
        """The value at rank round(q/100 * (n-1)), to within the relative error."""
        n = self.count
        rank = round(q / 100 * (n - 1))
        if rank < self.zeros:
            return 0.0
        seen = self.zeros
        for key in sorted(self.buckets):
            seen += self.buckets[key]
            if seen > rank:
                return 2 * self.gamma ** key / (self.gamma + 1)
        raise AssertionError("rank beyond the count")  # pragma: no cover


class Latencies:
    """One window's latencies: `values` (float64) take every new value; `fold()` moves them into
    a Sketch once the window has been switched to sketch mode (`to_sketch`)."""

    __slots__ = ("values", "sketch", "total")

    def __init__(self):
        self.values = array("d")
        self.sketch: Sketch | None = None
        self.total = 0.0

    def to_sketch(self) -> None:
        self.sketch = self.sketch or Sketch()
        self.fold()

    def fold(self) -> None:
        if self.sketch is not None and self.values:
            data = np.frombuffer(self.values, dtype=np.float64)
            self.total += float(data.sum())
            self.sketch.add_many(data)
            self.values = array("d")

    @property
    def count(self) -> int:
        return len(self.values) + (self.sketch.count if self.sketch else 0)

    @property
    def exact(self) -> bool:
        return self.sketch is None

    def summary(self, quantiles=(50, 95, 99)) -> dict[str, float]:
        if self.sketch is not None:
            self.fold()
        if not self.count:
            return {}
        if self.sketch is None:
            data = np.frombuffer(self.values, dtype=np.float64)
            stats = {f"latency_p{q}_ms": float(v) for q, v in zip(quantiles, np.percentile(data, quantiles))}
            stats["latency_mean_ms"] = float(data.mean())
        else:
            stats = {f"latency_p{q}_ms": self.sketch.percentile(q) for q in quantiles}
            stats["latency_mean_ms"] = self.total / self.sketch.count
        return {k: round(v, 3) for k, v in stats.items()}


def enforce_budget(windows: list[Latencies], budget: int) -> None:
    """Keeps at most `budget` exact values over all windows: the largest exact windows switch to
    sketches until the rest fit; windows already in sketch mode fold their new values."""
    held = 0
    for latencies in windows:
        latencies.fold()
        held += len(latencies.values)
    if held <= budget:
        return
    for latencies in sorted(windows, key=lambda w: len(w.values), reverse=True):
        held -= len(latencies.values)
        latencies.to_sketch()
        if held <= budget:
            return
