"""How a run's logged aggregates are recomputed from its per-question table.

No fixed metric list: for every aggregate the run logged, look for per-question columns that
reproduce it (the mean over judged questions, the mean over questions that have a value, or the
sum), and for `overall_score` the run's own weights (`weights.*` params). An aggregate is given a
confidence interval only when the table reproduces its logged value; per-question numeric
columns that no aggregate uses become metrics of their own (`mean <column>`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ragexp.compare.source import Run
from ragexp.compare.stats import Statistic

COUNTS = ("total_questions", "failed_questions")
NOT_SCORES = {"question_id"}
OVERALL = "overall_score"
HALLUCINATION = "hallucination"


@dataclass(frozen=True)
class MetricSpec:
    """`name` is computed as `kind` over `columns` of the rows in `rows` ("judged" or "valued")."""

    name: str
    columns: tuple[str, ...]
    kind: str  # "mean", "sum" or "overall"
    rows: str = "judged"
    weights: tuple[float, ...] = ()
    penalty: bool = False

    def statistic(self, n: int) -> Statistic:
        if self.kind == "sum":
            return lambda means: means[:, 0] * n
        if self.kind == "overall":
            w = np.asarray(self.weights)
            k = len(w)
            if self.penalty:
                return lambda means: (means[:, :k] @ w) * (1.0 - means[:, k])
            return lambda means: means[:, :k] @ w
        return lambda means: means[:, 0]

    def same_as(self, other: MetricSpec | None) -> bool:
        return other is not None and (self.columns, self.kind, self.rows, self.weights, self.penalty) == (
            other.columns, other.kind, other.rows, other.weights, other.penalty)

    def usable(self, table) -> np.ndarray:
        """Which rows of the table enter this metric."""
        mask = np.ones(len(table), dtype=bool)
        if self.rows == "judged" and "status" in table:
            mask &= (table["status"] == "judged").to_numpy()
        for column in self.columns:
            mask &= ~np.isnan(numeric(table[column]))
        return mask

    def matrix(self, table, mask: np.ndarray | None = None) -> np.ndarray:
        mask = self.usable(table) if mask is None else mask
        return np.column_stack([numeric(table[c])[mask] for c in self.columns]) if self.columns else np.empty((0, 0))

    def value(self, table) -> float:
        x = self.matrix(table)
        if len(x) == 0:
            return float("nan")
        return float(self.statistic(len(x))(x.mean(0, keepdims=True))[0])


def is_number(value) -> bool:
    return isinstance(value, (int, float, bool, np.number, np.bool_)) and not (
        isinstance(value, (float, np.floating)) and np.isnan(value))


def numeric(column) -> np.ndarray:
    """A table column as floats (booleans as 0/1), NaN where unset or not a number."""
    return np.array([float(v) if is_number(v) else np.nan for v in column.tolist()], dtype=float)


def score_columns(table) -> list[str]:
    """Per-question columns holding numbers (or booleans): every value that is set is a number."""
    columns = []
    for name in table.columns:
        if name in NOT_SCORES:
            continue
        values = [v for v in table[name].tolist() if v is not None and not (isinstance(v, float) and np.isnan(v))]
        if values and all(is_number(v) for v in values):
            columns.append(name)
    return columns


def close(a: float, b: float) -> bool:
    return bool(np.isfinite(a) and np.isfinite(b) and abs(a - b) <= 1e-3 + 1e-4 * abs(b))


def weights_of(run: Run) -> tuple[dict[str, float], bool] | None:
    """The metric weights and hallucination-penalty flag of the run's `weights` config."""
    weights, penalty = {}, False
    for key, value in run.params.items():
        if not key.startswith("weights.") or key == "weights._target_":
            continue
        name = key[len("weights."):]
        if name == "hallucination_penalty":
            penalty = value.lower() == "true"
        else:
            try:
                weights[name] = float(value)
            except ValueError:
                return None
    return (weights, penalty) if weights else None


def overall_spec(run: Run, columns: list[str]) -> MetricSpec | None:
    found = weights_of(run)
    if found is None:
        return None
    weights, penalty = found
    needed = list(weights) + ([HALLUCINATION] if penalty else [])
    if not all(c in columns for c in needed):
        return None
    return MetricSpec(OVERALL, tuple(needed), "overall", "judged", tuple(weights.values()), penalty)


def candidates(metric: str) -> list[str]:
    names = [metric]
    for prefix in ("avg_", "mean_", "total_"):
        if metric.startswith(prefix):
            names.append(metric[len(prefix):])
    if metric.endswith("_rate"):
        names.append(metric[: -len("_rate")])
    parts = metric.split("_")
    names += ["_".join(parts[i:]) for i in range(1, len(parts) - 1)]  # judge_cost_usd -> cost_usd
    return names


def spec_for(run: Run, metric: str, columns: list[str]) -> MetricSpec | None:
    """The recipe that reproduces the run's logged `metric` from its table, or None."""
    logged = run.metrics.get(metric)
    if logged is None or metric in COUNTS:
        return None
    options = []
    if metric == OVERALL:
        options.append(overall_spec(run, columns))
    for column in candidates(metric):
        if column in columns:
            options += [MetricSpec(metric, (column,), kind, rows)
                        for kind in ("mean", "sum") for rows in ("judged", "valued")]
    for spec in options:
        if spec is not None and close(spec.value(run.table), logged):
            return spec
    return None


def specs_for(run: Run) -> dict[str, MetricSpec]:
    """Every reproducible aggregate of the run, plus `mean <column>` for unused score columns."""
    columns = score_columns(run.table)
    specs = {m: s for m in run.metrics if (s := spec_for(run, m, columns)) is not None}
    used = {c for s in specs.values() for c in s.columns}
    for column in columns:
        if column not in used and not column.endswith("_std"):
            specs[f"mean {column}"] = MetricSpec(f"mean {column}", (column,), "mean", "valued")
    return specs


def per_question_overall(run: Run, spec: MetricSpec | None) -> np.ndarray:
    """Each judged question's own overall: its weighted score, set to 0 when it hallucinated (the
    question-level reading of the run's `* (1 - hallucination_rate)`)."""
    if spec is None or spec.kind != "overall":
        return spec.matrix(run.table)[:, 0] if spec is not None and spec.kind == "mean" else np.empty(0)
    x = spec.matrix(run.table)
    k = len(spec.weights)
    score = x[:, :k] @ np.asarray(spec.weights)
    return score * (1.0 - x[:, k]) if spec.penalty else score
