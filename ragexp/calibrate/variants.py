"""Which of several judged runs agrees best with people: the same labels against each run's scores
(variants of a rubric's criterion, two judges, two prompts), on the questions every run judged
and people labelled. Agreement is 1 - the mean absolute difference on the metric's 0-1 scale;
the difference between two runs is paired over the questions (a bootstrap of the per-question
differences), and a difference whose interval holds 0 is "cannot tell"."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ragexp.store.labels import Label
from ragexp.calibrate.source import JudgedRun


@dataclass
class Versus:
    other: str
    difference: float  # best's agreement - other's
    low: float
    high: float

    @property
    def verdict(self) -> str:
        return "cannot tell" if self.low <= 0 <= self.high else "agrees better"


@dataclass
class Variants:
    metric: str
    questions: int
    agreement: dict[str, float]  # run -> 1 - mean |judge - people| on 0-1
    best: str
    versus: list[Versus] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"metric": self.metric, "questions": self.questions, "agreement": self.agreement, "best": self.best,
                "versus": [{"other": v.other, "difference": v.difference, "ci": [v.low, v.high], "verdict": v.verdict}
                           for v in self.versus]}


def people_means(labels: list[Label], metric: str) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for label in labels:
        if label.metric == metric:
            values.setdefault(label.question_id, []).append(label.value)
    return {q: float(np.mean(v)) for q, v in values.items()}


def compare(runs: dict[str, JudgedRun], labels: dict[str, list[Label]], resamples: int = 2000, seed: int = 0,
            level: float = 0.95) -> list[Variants]:
    """For each metric every run has and people labelled: each run's agreement on the questions
    they all share, the best run, and its paired difference from each other run with its interval."""
    names = list(runs)
    metrics = [m for m in dict.fromkeys(label.metric for ls in labels.values() for label in ls)
               if all(m in run.metrics for run in runs.values())]
    found = []
    for metric in metrics:
        people = people_means(labels[names[0]], metric)
        tables = {n: r.judged() for n, r in runs.items()}
        judged = {n: dict(zip(t["question_id"].astype(str), t[metric].astype(float))) for n, t in tables.items()}
        common = sorted(q for q in people if all(q in judged[n] and judged[n][q] == judged[n][q] for n in names))
        if not common:
            continue
        low, high = runs[names[0]].scales[metric]
        truth = np.array([people[q] for q in common])
        errors = {n: np.abs(np.array([judged[n][q] for q in common]) - truth) / (high - low) for n in names}
        agreement = {n: round(float(1 - e.mean()), 4) for n, e in errors.items()}
        best = max(names, key=lambda n: (agreement[n], -names.index(n)))
        rng = np.random.default_rng(seed)
        draws = rng.integers(0, len(common), size=(resamples, len(common)))
        tail = (1 - level) / 2
        versus = []
        for other in (n for n in names if n != best):
            paired = errors[other] - errors[best]  # > 0: the best is closer to people on that question
            means = paired[draws].mean(axis=1)
            versus.append(Versus(other, round(float(paired.mean()), 4), round(float(np.quantile(means, tail)), 4),
                                 round(float(np.quantile(means, 1 - tail)), 4)))
        found.append(Variants(metric, len(common), agreement, best, versus))
    return found


def markdown(found: list[Variants], level: float = 0.95) -> list[str]:
    lines = ["", "## Which run agrees best with people", "",
             "Agreement: 1 - the mean absolute difference from people's labels on the metric's 0-1 scale, on the "
             f"questions every run judged and people labelled; the difference is paired over them [{level:.0%} bootstrap CI].",
             "", "| metric | questions | agreement per run | best | versus | difference | verdict |", "|" + " --- |" * 7]
    for v in found:
        shown = ", ".join(f"{n} {a:.3f}" for n, a in v.agreement.items())
        for n, vs in enumerate(v.versus):
            head = [v.metric, str(v.questions), shown, v.best] if n == 0 else ["", "", "", ""]
            lines.append("| " + " | ".join([*head, vs.other, f"{vs.difference:+.3f} [{vs.low:+.3f}, {vs.high:+.3f}]",
                                              f"{v.best} {vs.verdict}" if vs.verdict != "cannot tell" else "cannot tell"]) + " |")
    if not found:
        lines.append("(no metric that every run has and people labelled)")
    return lines
