"""A yes/no label (`hallucination`, `supported`, ...) against the judge that scored the same rows:
its own verdict's agreement, each score's ROC AUC, and the threshold to set.

The rows are split into a tuning part and a held-out part (seeded, per class); thresholds are
chosen on the tuning part only and every figure reported for them is the held-out one (with
`--holdout 0`, said to be in-sample). When the judge makes this verdict from a score and a setting
(`Judge.verdict_settings`), the threshold is fitted on that score and printed as a ready override
(`judge.<setting>=<value>`) only when it beats the current setting on the held-out part; the
balanced accuracy, false alarms and misses of both are shown. Otherwise the best rule on any of
its scores is shown, and said to have no setting."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ragexp.calibrate.source import JudgedRun
from ragexp.calibrate.thresholds import Cut, balanced_accuracy, best_cut, false_alarms, misses, roc_auc, split


@dataclass
class VerdictCalibration:
    label: str
    rows: int  # judged rows with this label
    positives: int
    tuning: int
    held_out: int
    verdict: dict[str, float] = field(default_factory=dict)  # the judge's own verdict (same name) on the held-out part
    auc: dict[str, float] = field(default_factory=dict)  # score -> ROC AUC on every row (higher score = yes)
    cut: Cut | None = None  # the chosen rule, fitted on the tuning part
    held_out_balanced_accuracy: float = float("nan")
    setting: str | None = None  # judge.<setting> the cut is the value of
    current: float | None = None  # its value now
    current_held_out_balanced_accuracy: float = float("nan")
    fitted_errors: dict[str, float] = field(default_factory=dict)  # false alarms, misses of the fitted rule (held-out)
    current_errors: dict[str, float] = field(default_factory=dict)  # the same for the current setting

    @property
    def override(self) -> str | None:
        """The fitted value as an override of the judge's setting (shown, recommended or not)."""
        return f"judge.{self.setting}={self.cut.threshold:.4g}" if self.setting and self.cut else None

    @property
    def recommended(self) -> str | None:
        """The override, when it beats the current setting on a held-out part (figures on the rows it
        was fitted on would flatter it)."""
        if self.override is None or not self.held_out:
            return None
        now = self.current_held_out_balanced_accuracy
        return self.override if self.current is None or now != now or self.held_out_balanced_accuracy > now else None

    @property
    def part(self) -> str:
        """What the figures were measured on."""
        return "held-out" if self.held_out else "in-sample (--holdout 0: nothing held out)"

    def to_json(self) -> dict:
        def number(v):
            return None if v is None or v != v else v

        return {"label": self.label, "rows": self.rows, "positives": self.positives, "tuning": self.tuning,
                "held_out": self.held_out, "verdict": {k: number(v) for k, v in self.verdict.items()},
                "roc_auc": {k: number(v) for k, v in self.auc.items()},
                "rule": self.cut.rule() if self.cut else None,
                "tuning_balanced_accuracy": number(self.cut.tuning_balanced_accuracy) if self.cut else None,
                "held_out_balanced_accuracy": number(self.held_out_balanced_accuracy),
                "override": self.override, "recommended": self.recommended, "figures_on": self.part,
                "current": self.current, "current_held_out_balanced_accuracy": number(self.current_held_out_balanced_accuracy),
                "fitted_errors": {k: number(v) for k, v in self.fitted_errors.items()},
                "current_errors": {k: number(v) for k, v in self.current_errors.items()}}


def calibrate(label: str, truth_by_question: dict[str, float], run: JudgedRun, judge, holdout: float = 0.3,
              seed: int = 0, groups: dict[str, str] | None = None) -> VerdictCalibration:
    """`groups` (question id -> its group, e.g. the source document): whole groups are held out."""
    table = run.judged().set_index("question_id")
    questions = [q for q in truth_by_question if q in table.index]
    truth = np.array([truth_by_question[q] == 1.0 for q in questions], dtype=bool)
    result = VerdictCalibration(label, len(questions), int(truth.sum()), 0, 0)
    if not questions:
        return result
    tuning, held = split(truth, holdout, seed, [groups.get(q) for q in questions] if groups is not None else None)
    result.tuning, result.held_out = len(tuning), len(held)
    check = held if len(held) else tuning  # nothing held out (--holdout 0): the figures are the tuning part's
    scores = {m: table.loc[questions, m].astype(float).to_numpy() for m in run.metrics if m != "hallucination"}
    result.auc = {m: roc_auc(s, truth) for m, s in scores.items()}
    if label in table:  # the judge's own verdict of this name
        said = table.loc[questions, label].astype(float).to_numpy() >= 0.5
        result.verdict = {"balanced_accuracy": balanced_accuracy(said[check], truth[check]), **errors(said[check], truth[check])}
    declared = judge.verdict_settings.get(label)
    if declared and declared[0] in scores:
        score, setting = declared
        result.cut = best_cut(score, scores[score][tuning], truth[tuning], higher=True)
        result.setting = setting
        current = judge.verdict_threshold(label)
        if current is not None:
            result.current = current
            said_now = scores[score][check] > current
            result.current_held_out_balanced_accuracy = balanced_accuracy(said_now, truth[check])
            result.current_errors = errors(said_now, truth[check])
    else:
        cuts = [c for m, s in scores.items() if (c := best_cut(m, s[tuning], truth[tuning])) is not None]
        result.cut = max(cuts, key=lambda c: c.tuning_balanced_accuracy, default=None)
    if result.cut is not None:
        said_fitted = result.cut.predict(scores[result.cut.score][check])
        result.held_out_balanced_accuracy = balanced_accuracy(said_fitted, truth[check])
        result.fitted_errors = errors(said_fitted, truth[check])
    return result


def errors(said: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """A yes/no rule's false alarms (on the "no" rows) and misses (on the "yes" rows)."""
    return {"false_alarms": false_alarms(said, truth), "misses": misses(said, truth)}


def markdown(results: list[VerdictCalibration], judge_name: str) -> list[str]:
    if not results:
        return []

    def f(v) -> str:
        return "—" if v is None or v != v else f"{v:.3f}"

    part = "held-out" if all(r.held_out for r in results) else "in-sample: --holdout 0"
    lines = ["", "## Yes/no labels", "",
             "| label | rows (yes) | tuning / held-out | judge's verdict: balanced accuracy, false alarms, misses "
             f"({part}) | ROC AUC of each score (higher = yes) | rule fitted on the tuning part | "
             f"its balanced accuracy, {part} |", "|" + " --- |" * 7]
    for r in results:
        verdict = ", ".join(f(r.verdict.get(k)) for k in ("balanced_accuracy", "false_alarms", "misses")) if r.verdict else "—"
        aucs = "; ".join(f"{m} {f(v)}" for m, v in r.auc.items())
        lines.append(f"| {r.label} | {r.rows} ({r.positives}) | {r.tuning} / {r.held_out} | {verdict} | {aucs} | "
                     f"{r.cut.rule() if r.cut else '—'} | {f(r.held_out_balanced_accuracy)} |")
    lines.append("")

    def figures(balanced: float, errors: dict) -> str:
        return (f"balanced accuracy {f(balanced)}, false alarms {f(errors.get('false_alarms'))}, "
                f"misses {f(errors.get('misses'))}")

    for r in results:
        fitted = f"{figures(r.held_out_balanced_accuracy, r.fitted_errors)}, {r.part}"
        now = (f"judge.{r.setting}={r.current:g} now: {figures(r.current_held_out_balanced_accuracy, r.current_errors)}"
               if r.current is not None else "")
        if r.recommended:
            lines.append(f"- {r.label}: set `{r.recommended}` ({fitted}); {now}" if now else
                         f"- {r.label}: set `{r.recommended}` ({fitted})")
        elif r.override and not r.held_out:
            lines.append(f"- {r.label}: fitted `{r.override}` ({fitted}); not recommended: with nothing held out "
                         f"its figures are on the rows it was fitted on" + (f"; {now}" if now else ""))
        elif r.override:
            lines.append(f"- {r.label}: keep the current setting: the fitted `{r.override}` ({fitted}) does not "
                         f"beat it on the held-out part; {now}")
        elif r.cut:
            lines.append(f"- {r.label}: judge {judge_name!r} has no setting for this verdict; the best rule on its "
                         f"scores is `{r.cut.rule()}` ({fitted})")
    return lines
