"""The regression check of a quality gate (`gate.baseline=RUN`): is this run significantly worse
than a baseline run, metric by metric, on the questions both judged?

Per metric, the per-question differences (this run - the baseline, paired by question id) give a
one-sided paired t-test of "worse by more than the margin" (`gate.margin`, on the metric's own
scale; a metric where higher is worse, such as hallucination, is worse when it rises), Holm's
correction across the metrics checked, and a two-sided CI of the mean difference. The gate fails
only on a metric that is significantly worse after the correction: noise between two runs of the
same system does not fail it (at most `alpha` of the time), a real drop does."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ragexp.base.names import higher_is_worse
from ragexp.errors import RagexpError
from ragexp.stats.power import detectable


@dataclass(frozen=True)
class Regression:
    metric: str
    questions: int
    new: float
    base: float
    difference: float  # new - base
    low: float
    high: float
    p: float  # one-sided, "worse by more than the margin"
    adjusted: float = 1.0  # Holm's
    margin: float = 0.0
    detectable: float = float("nan")  # the drop these questions detect with 80% power at alpha, from the differences' spread

    def worse(self, alpha: float) -> bool:
        return self.adjusted < alpha

    def line(self, alpha: float, level: float) -> str:
        verdict = "significantly worse: FAILED" if self.worse(alpha) else "not significantly worse: ok"
        margin = f" (margin {self.margin:g})" if self.margin else ""
        detects = f"; detects a drop of {self.detectable:.3g} (80% power)" if self.detectable == self.detectable else ""
        return (f"{self.metric}: {self.new:.4f} vs baseline {self.base:.4f} on {self.questions} questions, "
                f"difference {self.difference:+.4f} [{level:.0%} CI {self.low:+.4f}, {self.high:+.4f}]{margin}, "
                f"p {self.p:.3g} (Holm {self.adjusted:.3g}){detects}: {verdict}")


ROW_IDS = "q1, q2, ... as no id was given"


def refuse_row_ids(questions, where: str) -> None:
    """The regression check pairs questions by id: ids made from the rows' order are refused."""
    if any(q.id_from_row for q in questions):
        raise RagexpError(f"gate.baseline pairs questions by id, and the ids of {where} were made from its rows' order "
                          f"({ROW_IDS}), which a reordered or edited file changes: give each row an id (a column id or "
                          "question_id, or dataset.columns.question_id=...)")


def baseline_table(target: str):
    """A baseline run's per-question table of judged questions (a run folder, or an MLflow run id),
    indexed by question id."""
    from ragexp.store.reader import question_table

    try:
        table = question_table(target)
    except RagexpError as err:
        raise RagexpError(f"gate.baseline: {err}") from None
    if "id_from_row" in table and table["id_from_row"].fillna(False).astype(bool).any():
        raise RagexpError(f"gate.baseline: the question ids of the baseline {target} were made from its rows' order "
                          f"({ROW_IDS}); pairing by id could pair different questions: give each row an id (a column "
                          "id or question_id, or dataset.columns.question_id=...) and run the baseline again")
    table = table[table["status"] == "judged"].copy() if "status" in table else table.copy()
    table["question_id"] = table["question_id"].astype(str)
    return table.drop_duplicates("question_id").set_index("question_id")


def paired_with(rows: Mapping[str, Mapping[str, float]], base, target: str, metrics: Sequence[str],
                margins: Mapping[str, float], alpha: float = 0.05) -> tuple[int, list[Regression]]:
    """How many questions this run (`rows`: question id -> column -> value) shares with the
    baseline `target` (its table `base`), and each metric's comparison on them (`compare`); a
    RagexpError when they share none (they are paired by question id)."""
    shared = sum(1 for q in rows if q in base.index)
    if not shared:
        raise RagexpError(f"gate.baseline: the baseline {target} shares no judged question with this run "
                          "(they are paired by question id): compare runs of the same questions")
    return shared, compare(rows, base, metrics, margins, alpha=alpha)


def present(value) -> bool:
    """A score that is there: not None, not NaN, a number (a bool counts: hallucination)."""
    return isinstance(value, (int, float, np.number, np.bool_)) and value == value


def compare(new: Mapping[str, Mapping[str, float]], base, metrics: Sequence[str], margins: Mapping[str, float],
            level: float = 0.95, alpha: float = 0.05) -> list[Regression]:
    """Each metric of `metrics` that both runs scored on shared questions: this run's rows `new`
    (question id -> column -> value) against the baseline's table, paired by question id."""
    from scipy import stats

    from ragexp.stats.inference import holm

    found = []
    for metric in metrics:
        if metric not in base.columns:
            continue
        pairs = [(float(row[metric]), float(base.at[q, metric])) for q, row in new.items()
                 if q in base.index and present(row.get(metric)) and present(base.at[q, metric])]
        if len(pairs) < 2:
            continue
        x, y = np.array(pairs).T
        d = x - y
        sign = -1.0 if higher_is_worse(metric) else 1.0  # d * sign < 0: worse
        margin = float(margins.get(metric, margins.get("*", 0.0)))
        error = d.std(ddof=1) / np.sqrt(len(d))
        shifted = sign * d.mean() + margin  # > 0: not worse by more than the margin
        p = float(stats.t.cdf(shifted / error, len(d) - 1)) if error > 0 else (0.0 if shifted < 0 else 1.0)
        half = float(stats.t.ppf(0.5 + level / 2, len(d) - 1) * error)
        found.append(Regression(metric, len(d), round(float(x.mean()), 4), round(float(y.mean()), 4),
                                round(float(d.mean()), 4), round(float(d.mean()) - half, 4),
                                round(float(d.mean()) + half, 4), p, margin=margin,
                                detectable=detectable(len(d), float(d.std(ddof=1)), alpha) if error > 0 else float("nan")))
    adjusted = holm([r.p for r in found]) if found else []
    return [Regression(**{**r.__dict__, "adjusted": float(a)}) for r, a in zip(found, adjusted)]
