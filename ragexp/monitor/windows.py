"""Records grouped into time windows (`monitor.window=1d`, `1h`, `15m`, ...; aligned to the UTC
epoch, so a day is midnight to midnight UTC), each summarised as records stream past: request
count, latency percentiles, tokens and cost, error rate by kind, satisfaction from feedback,
and a seeded sample of records for the judge."""
from __future__ import annotations

import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, UTC
from typing import Callable, Iterable, Sequence

import numpy as np

from ragexp.errors import RagexpError
from ragexp.monitor.percentiles import Latencies, enforce_budget
from ragexp.monitor.records import Fields
from ragexp.stats.sequential import Moments

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
LONGEST_WINDOW = 520 * UNITS["w"]  # so that every window of a record's time (values.EARLIEST..LATEST) is a date
BUDGET_CHECK_EVERY = 1 << 17  # records between two checks of the exact-percentile budget (about)


def window_seconds(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([smhdw])\s*", str(text))
    if not match or int(match.group(1)) < 1:
        raise RagexpError(f"monitor.window: {text!r} is not a duration such as 1d, 6h, 15m, 30s or 1w")
    seconds = int(match.group(1)) * UNITS[match.group(2)]
    if seconds > LONGEST_WINDOW:
        raise RagexpError(f"monitor.window: {text!r} is longer than 520w (ten years)")
    return seconds


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def metric_suffix(kind: str) -> str:
    """An error kind as part of an MLflow metric key (letters, digits, _ - . / only)."""
    return re.sub(r"[^A-Za-z0-9_.\-/]+", "_", kind)[:100] or "unknown"


class Reservoir:
    """A uniform sample of `size` items from a stream of unknown length (Li's algorithm L: the
    random numbers drawn depend on the sample size, not on the stream's length)."""

    def __init__(self, size: int, rng: random.Random):
        self.size, self.rng = size, rng
        self.items: list = []
        self.seen = 0
        self.weight = math.exp(math.log(self.rng.random()) / size) if size else 0.0
        self.next = size + self.skip() if size else -1  # 1-based position of the next item to take

    def skip(self) -> int:
        return int(math.log(self.rng.random()) / math.log(1 - self.weight)) + 1

    def offer(self, count: int, item_at: Callable[[int], object]) -> None:
        """The next `count` items of the stream; `item_at(i)` makes the i-th (0-based) of them."""
        if not self.size:
            return
        first = self.seen
        self.seen += count
        while len(self.items) < min(self.size, self.seen):  # filling: item number len(items) of the stream
            self.items.append(item_at(len(self.items) - first))
        while self.next <= self.seen:
            self.items[self.rng.randrange(self.size)] = item_at(self.next - 1 - first)
            self.weight *= math.exp(math.log(self.rng.random()) / self.size)
            self.next += self.skip()


@dataclass
class Window:
    start: float  # seconds since the epoch
    end: float
    sample: Reservoir  # records without an error, for the judge: (line, row)
    requests: int = 0
    latencies: Latencies = field(default_factory=Latencies)
    tokens: dict = field(default_factory=dict)  # model -> [input tokens, output tokens]
    errors: Counter = field(default_factory=Counter)  # error kind -> count
    feedback_count: int = 0
    satisfied: int = 0
    latency_moments: Moments = Moments()  # count, sum and sum of squares of the latencies (the A/B test's)

    def stats(self, prices, default_model: str) -> dict[str, float]:
        """The window's metrics, as logged to MLflow (keys are MLflow metric names)."""
        tokens_in = sum(t[0] for t in self.tokens.values())
        tokens_out = sum(t[1] for t in self.tokens.values())
        cost = sum(prices.cost(model or default_model, t[0], t[1]) for model, t in self.tokens.items())
        errors = sum(self.errors.values())
        stats = {"requests": self.requests, **self.latencies.summary(), "tokens_in": tokens_in,
                 "tokens_out": tokens_out, "cost_usd": round(cost, 6), "errors": errors,
                 "error_rate": round(errors / self.requests, 6)}
        for kind, count in sorted(self.errors.items()):
            stats[f"error_rate_{metric_suffix(kind)}"] = round(count / self.requests, 6)
        stats["feedback_count"] = self.feedback_count
        if self.feedback_count:
            stats["satisfaction_rate"] = round(self.satisfied / self.feedback_count, 6)
        return stats


class Summary:
    """Every window of a stream of record batches. `judge_sample` > 0 keeps, per window, a
    uniform sample of that many records without an error, seeded by `seed` and the window's
    start (so a window's sample does not depend on the other windows in the file).

    With `variants` (an A/B test), each window is also summarised per variant (`arms`: (window
    number, variant) -> Window), and the judged sample is drawn per variant per window instead
    (seeded by the variant's name too); records from before `since` (seconds) are left out."""

    def __init__(self, window: str, judge_sample: int = 0, seed: int = 0, exact_percentiles_max: int = 5_000_000,
                 variants: bool = False, since: float | None = None):
        self.seconds = window_seconds(window)
        if not isinstance(judge_sample, int) or judge_sample < 0:
            raise RagexpError(f"monitor.judge_sample must be an integer >= 0, got {judge_sample!r}")
        if not isinstance(exact_percentiles_max, int) or exact_percentiles_max < 0:
            raise RagexpError(f"monitor.exact_percentiles_max must be an integer >= 0, got {exact_percentiles_max!r}")
        self.judge_sample, self.seed, self.budget = judge_sample, seed, exact_percentiles_max
        self.variants, self.since = variants, since
        self.windows: dict[int, Window] = {}
        self.arms: dict[tuple[int, str], Window] = {}
        self.records = 0
        self.unassigned = 0  # records of an A/B test's span without a variant
        self.before = 0  # records from before the test's start
        self.source = 0  # the file being read
        self.variant_names: set[str] = set()  # the variants records carry when no A/B test is asked for

    def window(self, number: int) -> Window:
        if number not in self.windows:
            start = number * self.seconds
            sample = Reservoir(0 if self.variants else self.judge_sample, random.Random(f"{self.seed}:{start}"))
            self.windows[number] = Window(start, start + self.seconds, sample)
        return self.windows[number]

    def arm(self, number: int, variant: str) -> Window:
        if (number, variant) not in self.arms:
            start = number * self.seconds
            sample = Reservoir(self.judge_sample, random.Random(f"{self.seed}:{start}:{variant}"))
            self.arms[number, variant] = Window(start, start + self.seconds, sample)
        return self.arms[number, variant]

    def add(self, batches: Iterable[Fields], source: int = 0) -> None:
        """`source`: the number of the file the batches come from (kept with the sampled records)."""
        for fields in batches:
            self.source = source
            if self.since is not None:
                early = fields.time < self.since
                if early.any():
                    self.before += int(early.sum())
                    if early.all():
                        continue
                    fields = subset(fields, ~early)
            numbers = (fields.time // self.seconds).astype(np.int64)
            if numbers[0] == numbers[-1] and (numbers == numbers[0]).all():
                self.add_to(self.window(int(numbers[0])), fields, None)
            else:
                for number in np.unique(numbers).tolist():
                    self.add_to(self.window(number), fields, numbers == number)
            if self.variants:
                self.add_to_arms(fields, numbers)
            elif fields.variant is not None and len(self.variant_names) < 100:
                self.variant_names.update(v for v in fields.variant if v)
            self.records += len(fields.rows)
            if self.records % BUDGET_CHECK_EVERY < len(fields.rows):
                self.enforce_budget()
        self.enforce_budget()

    def enforce_budget(self) -> None:
        enforce_budget([w.latencies for w in (*self.windows.values(), *self.arms.values())], self.budget)

    def add_to_arms(self, fields: Fields, numbers: np.ndarray) -> None:
        names = fields.variant or [None] * len(fields.rows)
        distinct = sorted({v for v in names if v})
        index = {v: i for i, v in enumerate(distinct)}
        codes = np.fromiter((index[v] if v else -1 for v in names), np.int64, len(names))
        self.unassigned += int((codes < 0).sum())
        for code, variant in enumerate(distinct):
            chosen = codes == code
            for number in np.unique(numbers[chosen]).tolist():
                self.add_to(self.arm(number, variant), fields, chosen & (numbers == number))

    def add_to(self, window: Window, f: Fields, mask: np.ndarray | None) -> None:
        """The records of batch `f` selected by `mask` (None: all) into `window`."""
        pick = (lambda column: column) if mask is None else (lambda column: column[mask])
        where = None if mask is None else np.flatnonzero(mask)
        latency, failed, feedback = pick(f.latency_ms), pick(f.failed), pick(f.feedback)
        window.requests += len(failed)
        timed = latency[~np.isnan(latency)]
        window.latencies.values.frombytes(timed.tobytes())
        if self.variants:
            window.latency_moments += Moments.of(timed)
        models = f.model if where is None or f.model is None else [f.model[i] for i in where]
        tokens_in, tokens_out = pick(f.tokens_in), pick(f.tokens_out)
        distinct = set(models) if models is not None else {None}
        for model in distinct:
            chosen = slice(None) if models is None or len(distinct) == 1 else np.array([m == model for m in models])
            totals = window.tokens.setdefault(model, [0, 0])
            totals[0] += int(tokens_in[chosen].sum())
            totals[1] += int(tokens_out[chosen].sum())
        if failed.any():
            errors = f.error if where is None else [f.error[i] for i in where]
            window.errors.update(e for e, bad in zip(errors, failed) if bad)
        window.feedback_count += int((feedback >= 0).sum())
        window.satisfied += int((feedback == 1).sum())
        if self.judge_sample:
            positions = np.flatnonzero(~failed) if where is None else where[~failed]
            source = self.source
            window.sample.offer(len(positions), lambda i: (source, int(f.lines[positions[i]]), f.rows[positions[i]]))

    def ordered(self) -> list[Window]:
        return [self.windows[n] for n in sorted(self.windows)]

    def ordered_arms(self) -> list[tuple[int, str, Window]]:
        """(the window's place in `ordered()`, variant, the variant's part of the window), in time,
        then variant, order."""
        place = {n: i for i, n in enumerate(sorted(self.windows))}
        return [(place[n], v, self.arms[n, v]) for n, v in sorted(self.arms)]


def subset(f: Fields, keep: np.ndarray) -> Fields:
    """The records of batch `f` that `keep` selects."""
    where = np.flatnonzero(keep)

    def pick(values: Sequence) -> list:
        return [values[int(i)] for i in where]

    return Fields(f.lines[keep], f.time[keep], f.latency_ms[keep], f.tokens_in[keep], f.tokens_out[keep],
                  None if f.model is None else pick(f.model), f.failed[keep], pick(f.error), f.feedback[keep],
                  pick(f.rows), None if f.variant is None else pick(f.variant))
