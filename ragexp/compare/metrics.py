"""How a run's logged aggregates are recomputed from its per-question table: as the run's own
aggregation spec says (`aggregates.json`, made by ragexp.metrics.scoring and logged with the run).

An aggregate gets a confidence interval when its kind is computed from the table (mean, sum,
overall) and the table reproduces its logged value; runs logged without aggregates.json (older
ragexp) get none. Per-question numeric columns that no aggregate uses become metrics of their
own (`mean <column>`)."""
from __future__ import annotations

from dataclasses import fields
from typing import Callable, Self

import numpy as np

from ragexp.store.reader import Run
from ragexp.stats.inference import Statistic
from ragexp.metrics.scoring import Aggregate

COUNTS = ("total_questions", "failed_questions")
NOT_SCORES = {"question_id"}
FROM_TABLE = ("mean", "sum", "overall")


class MetricSpec(Aggregate):
    """An aggregate of the run's spec, evaluated on its per-question table (a DataFrame)."""

    @classmethod
    def from_json(cls, entry: dict) -> Self:
        known = {f.name for f in fields(Aggregate)}
        return super().from_json({k: v for k, v in entry.items() if k in known})

    def statistic(self, n: int) -> Statistic:
        """The aggregate from resampled means of its inputs (one row per resample)."""
        return lambda means: self.from_means(list(means.T), n)

    def same_as(self, other: MetricSpec | None) -> bool:
        return other is not None and (self.inputs, self.kind, self.rows, self.weights, self.penalty, self.offset) == (
            other.inputs, other.kind, other.rows, other.weights, other.penalty, other.offset)

    def usable(self, table) -> np.ndarray:
        """Which rows of the table enter this metric."""
        mask = np.ones(len(table), dtype=bool)
        if self.where:  # one slice of the questions (ragexp.metrics.scoring.slice_spec)
            column, value = self.where
            mask &= (table[column].fillna("").astype(str) == value).to_numpy() if column in table else False
        if self.rows == "judged" and "status" in table:
            mask &= judged_rows(table)
        for column in self.inputs:
            mask &= ~np.isnan(numeric_column(table, column))
        return mask

    def matrix(self, table, mask: np.ndarray | None = None) -> np.ndarray:
        mask = self.usable(table) if mask is None else mask
        return np.column_stack([numeric_column(table, c)[mask] for c in self.inputs]) if self.inputs else np.empty((0, 0))

    def value(self, table) -> float:
        x = self.matrix(table)
        if len(x) == 0:
            return float("nan")
        return float(self.statistic(len(x))(x.mean(0, keepdims=True))[0])


def is_number(value) -> bool:
    return isinstance(value, (int, float, bool, np.number, np.bool_)) and not (
        isinstance(value, (float, np.floating)) and np.isnan(value))


_CONVERTED: dict[int, tuple[Callable, dict[str, np.ndarray]]] = {}  # id(table) -> (a weak reference to it, its columns as floats)


def converted(table) -> dict[str, np.ndarray]:
    """A table's columns already read as numbers (a leaderboard reads each column of each run's
    table for every metric; the conversion is done once a table). Kept while the table lives."""
    import weakref

    key = id(table)
    held = _CONVERTED.get(key)
    if held is None or held[0]() is not table:
        held = (weakref.ref(table), {})
        _CONVERTED[key] = held
        weakref.finalize(table, _CONVERTED.pop, key, None)
    return held[1]


def numeric_column(table, name: str) -> np.ndarray:
    """`numeric(table[name])`, converted once per table (the array is shared: do not write to it)."""
    done = converted(table)
    if name not in done:
        done[name] = numeric(table[name])
        done[name].flags.writeable = False
    return done[name]


def judged_rows(table) -> np.ndarray:
    done = converted(table)
    if "\0judged" not in done:
        done["\0judged"] = table["status"].to_numpy(dtype=object) == "judged"
        done["\0judged"].flags.writeable = False
    return done["\0judged"]


def numeric(column) -> np.ndarray:
    """A table column as floats (booleans as 0/1), NaN where unset or not a number."""
    if column.dtype.kind in "biuf":  # numbers or booleans throughout (NaN where unset): as they are
        return column.to_numpy(dtype=float, na_value=np.nan)
    return np.array([float(v) if is_number(v) else np.nan for v in column.tolist()], dtype=float)


def score_columns(table) -> list[str]:
    """Per-question columns holding numbers (or booleans): every value that is set is a number."""
    columns = []
    for name in table.columns:
        if name in NOT_SCORES:
            continue
        column = table[name]
        if column.dtype.kind in "biuf":  # a column of numbers (or booleans): one when any is set
            if column.notna().any():
                columns.append(name)
            continue
        values = [v for v in column.tolist() if v is not None and not (isinstance(v, float) and np.isnan(v))]
        if values and all(is_number(v) for v in values):
            columns.append(name)
    return columns


def close(a: float, b: float) -> bool:
    return bool(np.isfinite(a) and np.isfinite(b) and abs(a - b) <= 1e-3 + 1e-4 * abs(b))


def specs_for(run: Run) -> dict[str, MetricSpec]:
    """Every aggregate of the run's spec that its table reproduces, plus `mean <column>` for
    score columns no aggregate uses."""
    columns = score_columns(run.table)
    specs = {}
    for spec in map(MetricSpec.from_json, run.aggregation or ()):
        logged = run.metrics.get(spec.name)
        if (spec.kind in FROM_TABLE and logged is not None and all(c in columns for c in spec.inputs)
                and close(spec.value(run.table), logged)):
            specs[spec.name] = spec
    used = {c for s in specs.values() for c in s.inputs}
    for column in columns:
        if column not in used and not column.endswith("_std"):
            specs[f"mean {column}"] = MetricSpec(f"mean {column}", (column,), "mean", "valued")
    return specs


def per_question_overall(run: Run, spec: MetricSpec | None) -> np.ndarray:
    """Each question's own value of the objective: for overall_score its weighted score, set to 0
    when it hallucinated (the question-level reading of the run's `* (1 - hallucination_rate)`)."""
    if spec is None or spec.kind not in ("mean", "overall"):
        return np.empty(0)
    return spec.from_means(list(spec.matrix(run.table).T))


def expensive_judgements(run: Run, spec: MetricSpec) -> int | None:
    """How many of the questions behind `spec` a cascade's expensive judge judged, when the spec
    reads a corrected metric (one with a `<metric>_cheap` column beside it), else None."""
    table = run.table
    if "judged_by" not in table or not any(f"{column}_cheap" in table for column in spec.inputs):
        return None
    return int((table["judged_by"].astype(str) == "cheap+expensive").to_numpy()[spec.usable(table)].sum())
