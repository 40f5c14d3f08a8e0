"""The regression check of a quality gate (`gate.baseline=RUN`): is this run significantly worse
than a baseline run, metric by metric, on the questions both judged?

Per metric, the per-question differences (this run - the baseline, paired by question id) give a
one-sided paired t-test of "worse by more than the margin" (`gate.margin`, on the metric's own
scale; a metric where higher is worse, such as hallucination, is worse when it rises), Holm's
correction across the metrics checked, and a two-sided CI of the mean difference. The gate fails
on a metric that is significantly worse after the correction: noise between two runs of the
same system does not fail it (at most `alpha` of the time), a real drop does.

A check that cannot tell does not pass: each metric's line gives the smallest drop its questions
detect (80% power at `alpha`, from the spread of the differences), and with no margin given for
a metric, one that detects only drops above a tenth of the metric's scale (`TELLS`) fails as "too
few questions to tell", unless the user accepts it (`accept_low_power`). Questions pair by id; a
row that had none pairs by the digest of its question's text (ragexp.base.pairing)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ragexp.base.names import higher_is_worse
from ragexp.base.pairing import pairing_id, shared_question
from ragexp.errors import RagexpError
from ragexp.stats.power import detectable

TELLS = 0.1  # with no margin, a check must detect a drop of a tenth of the metric's scale, or it cannot tell


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
    scale: tuple[float, float] | None = None  # the metric's scale, when known

    def worse(self, alpha: float) -> bool:
        return self.adjusted < alpha

    @property
    def too_few(self) -> bool:
        """With no margin given, its questions detect only drops above a tenth of its scale (`TELLS`)."""
        if self.margin or self.scale is None or self.detectable != self.detectable:
            return False
        return self.detectable > TELLS * (self.scale[1] - self.scale[0])

    def line(self, alpha: float, level: float, accept_low_power: bool = False) -> str:
        if self.worse(alpha):
            verdict = "significantly worse: FAILED"
        elif self.too_few:
            verdict = "too few questions to tell" + (" (accepted): ok" if accept_low_power else ": FAILED")
        else:
            verdict = "not significantly worse: ok"
        margin = f" (margin {self.margin:g})" if self.margin else ""
        detects = "" if self.detectable != self.detectable else "; detects any drop (no question's difference varies)" \
            if self.detectable == 0 else f"; detects a drop of {self.detectable:.3g} (80% power)"
        if self.too_few and self.scale is not None:
            tenth = TELLS * (self.scale[1] - self.scale[0])
            detects += f", more than {tenth:.3g} ({TELLS:.0%} of its {self.scale[0]:g}-{self.scale[1]:g} scale)"
        return (f"{self.metric}: {self.new:.4f} vs baseline {self.base:.4f} on {self.questions} questions, "
                f"difference {self.difference:+.4f} [{level:.0%} CI {self.low:+.4f}, {self.high:+.4f}]{margin}, "
                f"p {self.p:.3g} (Holm {self.adjusted:.3g}){detects}: {verdict}")


def failed(found: Sequence[Regression], alpha: float, accept_low_power: bool = False) -> list[Regression]:
    """The metrics that fail the check: significantly worse, or (unless accepted) too few questions to tell."""
    return [r for r in found if r.worse(alpha) or (r.too_few and not accept_low_power)]


def metric_scale(metric: str, scales: Mapping[str, tuple[float, float]]) -> tuple[float, float] | None:
    """A per-question metric's scale from a run's aggregate scales (`faithfulness`: `avg_faithfulness`'s;
    `hallucination`: 0-1), None when unknown."""
    scale = scales.get(metric) or scales.get(f"avg_{metric}")
    if scale is None and metric == "hallucination":
        return (0.0, 1.0)
    return (float(scale[0]), float(scale[1])) if scale is not None else None


GIVE_IDS = "give each row an id (a column id or question_id, or dataset.columns.question_id=...)"


def refuse_shared_questions(questions, where: str) -> None:
    """Rows without an id pair by their question's text: two such rows asking the same question are refused."""
    same = shared_question([q.qid for q in questions], [q.text for q in questions], [q.id_from_row for q in questions])
    if same is not None:
        raise RagexpError(f"gate.baseline pairs the rows of {where} by their question's text, as they have no id, and "
                          f"rows {same[0]} and {same[1]} both ask {same[2][:80]!r}: {GIVE_IDS}")


def pairing_ids(table) -> list[str]:
    """Each row's pairing id (ragexp.base.pairing) in a per-question table."""
    made = table["id_from_row"].fillna(False).astype(bool) if "id_from_row" in table else [False] * len(table)
    texts = table["question"].astype(str) if "question" in table else [""] * len(table)
    return [pairing_id(q, t, m) for q, t, m in zip(table["question_id"].astype(str), texts, made)]


def baseline_table(target: str):
    """A baseline run's per-question table of judged questions (a run folder, or an MLflow run id),
    indexed by pairing id (its question id, or for a row that had none the digest of its text);
    two id-less rows that ask the same question are refused."""
    from ragexp.store.reader import question_table

    try:
        table = question_table(target)
    except RagexpError as err:
        raise RagexpError(f"gate.baseline: {err}") from None
    if "id_from_row" in table:
        made = table["id_from_row"].fillna(False).astype(bool)
        same = shared_question(list(table["question_id"].astype(str)), list(table["question"].astype(str)), list(made))
        if same is not None:
            raise RagexpError(f"gate.baseline: the rows of the baseline {target} have no id and pair by their question's "
                              f"text, and rows {same[0]} and {same[1]} both ask {same[2][:80]!r}: {GIVE_IDS}, and run "
                              "the baseline again")
    table = table[table["status"] == "judged"].copy() if "status" in table else table.copy()
    table["question_id"] = table["question_id"].astype(str)
    table["pairing_id"] = pairing_ids(table)
    return table.drop_duplicates("pairing_id").set_index("pairing_id")


def paired_with(rows: Mapping[str, Mapping[str, float]], base, target: str, metrics: Sequence[str],
                margins: Mapping[str, float], alpha: float = 0.05,
                scales: Mapping[str, tuple[float, float]] | None = None) -> tuple[int, list[Regression]]:
    """How many questions this run (`rows`: pairing id -> column -> value) shares with the
    baseline `target` (its table `base`), and each metric's comparison on them (`compare`); a
    RagexpError when they share none."""
    shared = sum(1 for q in rows if q in base.index)
    if not shared:
        raise RagexpError(f"gate.baseline: the baseline {target} shares no judged question with this run (they pair "
                          "by question id, or by the question's text where a row had no id): compare runs of the same "
                          "questions")
    return shared, compare(rows, base, metrics, margins, alpha=alpha, scales=scales)


def present(value) -> bool:
    """A score that is there: not None, not NaN, a number (a bool counts: hallucination)."""
    return isinstance(value, (int, float, np.number, np.bool_)) and value == value


def compare(new: Mapping[str, Mapping[str, float]], base, metrics: Sequence[str], margins: Mapping[str, float],
            level: float = 0.95, alpha: float = 0.05,
            scales: Mapping[str, tuple[float, float]] | None = None) -> list[Regression]:
    """Each metric of `metrics` that both runs scored on shared questions: this run's rows `new`
    (pairing id -> column -> value) against the baseline's table, paired by pairing id. One shared
    question tests nothing: its metric's p is 1 and it detects no drop (infinite)."""
    from scipy import stats

    from ragexp.stats.inference import holm

    found = []
    for metric in metrics:
        if metric not in base.columns:
            continue
        pairs = [(float(row[metric]), float(base.at[q, metric])) for q, row in new.items()
                 if q in base.index and present(row.get(metric)) and present(base.at[q, metric])]
        if not pairs:
            continue
        x, y = np.array(pairs).T
        d = x - y
        margin = float(margins.get(metric, margins.get("*", 0.0)))
        scale = metric_scale(metric, scales or {})
        if len(d) < 2:
            found.append(Regression(metric, 1, round(float(x[0]), 4), round(float(y[0]), 4), round(float(d[0]), 4),
                                    -np.inf, np.inf, 1.0, margin=margin, detectable=np.inf, scale=scale))
            continue
        sign = -1.0 if higher_is_worse(metric) else 1.0  # d * sign < 0: worse
        error = d.std(ddof=1) / np.sqrt(len(d))
        shifted = sign * d.mean() + margin  # > 0: not worse by more than the margin
        p = float(stats.t.cdf(shifted / error, len(d) - 1)) if error > 0 else (0.0 if shifted < 0 else 1.0)
        half = float(stats.t.ppf(0.5 + level / 2, len(d) - 1) * error)
        found.append(Regression(metric, len(d), round(float(x.mean()), 4), round(float(y.mean()), 4),
                                round(float(d.mean()), 4), round(float(d.mean()) - half, 4),
                                round(float(d.mean()) + half, 4), p, margin=margin,
                                detectable=detectable(len(d), float(d.std(ddof=1)), alpha), scale=scale))
    adjusted = holm([r.p for r in found]) if found else []
    return [Regression(**{**r.__dict__, "adjusted": float(a)}) for r, a in zip(found, adjusted)]
