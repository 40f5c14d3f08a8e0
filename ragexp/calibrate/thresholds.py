"""Yes/no labels against the judge: how its own verdict agrees (balanced accuracy, false alarms,
misses), how well each of its scores separates the two (ROC AUC), and the threshold on a score
that maximises balanced accuracy on a tuning part, checked on a held-out part nothing was tuned on.

A verdict is positive when the score is above the threshold (`higher`), or below it; the
threshold is the midpoint between two neighbouring scores, so it separates the tuning rows as the
best cut does."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def balanced_accuracy(predicted: np.ndarray, truth: np.ndarray) -> float:
    """(true positive rate + true negative rate) / 2; nan when one class is absent."""
    predicted, truth = np.asarray(predicted, bool), np.asarray(truth, bool)
    if truth.all() or not truth.any():
        return float("nan")
    return float((np.mean(predicted[truth]) + np.mean(~predicted[~truth])) / 2)


def false_alarms(predicted: np.ndarray, truth: np.ndarray) -> float:
    """Share of the negatives (e.g. answers people found fully supported) the verdict flags."""
    predicted, truth = np.asarray(predicted, bool), np.asarray(truth, bool)
    return float(np.mean(predicted[~truth])) if (~truth).any() else float("nan")


def misses(predicted: np.ndarray, truth: np.ndarray) -> float:
    predicted, truth = np.asarray(predicted, bool), np.asarray(truth, bool)
    return float(np.mean(~predicted[truth])) if truth.any() else float("nan")


def roc_auc(scores: np.ndarray, truth: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counting half; nan with one class."""
    scores, truth = np.asarray(scores, float), np.asarray(truth, bool)
    positives, negatives = scores[truth], scores[~truth]
    if not len(positives) or not len(negatives):
        return float("nan")
    greater = (positives[:, None] > negatives[None, :]).mean()
    ties = (positives[:, None] == negatives[None, :]).mean()
    return float(greater + ties / 2)


@dataclass(frozen=True)
class Cut:
    """A verdict made from a score: positive when `score > threshold` (higher) or `score < threshold`."""

    score: str
    threshold: float
    higher: bool
    tuning_balanced_accuracy: float

    def predict(self, scores: np.ndarray) -> np.ndarray:
        scores = np.asarray(scores, float)
        return scores > self.threshold if self.higher else scores < self.threshold

    def rule(self) -> str:
        return f"{self.score} {'>' if self.higher else '<'} {self.threshold:.4g}"


def best_cut(score: str, scores: np.ndarray, truth: np.ndarray, higher: bool | None = None) -> Cut | None:
    """The threshold (and, unless `higher` is given, the direction) with the highest balanced
    accuracy on these rows; the lowest such threshold when several tie. None with one class."""
    scores, truth = np.asarray(scores, float), np.asarray(truth, bool)
    if truth.all() or not truth.any():
        return None
    values = np.unique(scores)
    candidates = np.concatenate([[values[0] - 1.0], (values[:-1] + values[1:]) / 2, [values[-1] + 1.0]])
    best: Cut | None = None
    for direction in ((True, False) if higher is None else (higher,)):
        predicted = scores[None, :] > candidates[:, None] if direction else scores[None, :] < candidates[:, None]
        tpr = predicted[:, truth].mean(axis=1)
        tnr = (~predicted[:, ~truth]).mean(axis=1)
        accuracy = (tpr + tnr) / 2
        i = int(np.argmax(accuracy))
        if best is None or accuracy[i] > best.tuning_balanced_accuracy + 1e-12:
            best = Cut(score, float(np.round(candidates[i], 4)), direction, float(accuracy[i]))
    return best


def split(truth: np.ndarray, holdout: float, seed: int = 0, groups=None) -> tuple[np.ndarray, np.ndarray]:
    """(tuning, held-out) row positions: a seeded shuffle of each class, `holdout` of each held out
    (at least one of each class in both parts when the class has two rows or more). With `groups`
    (a value per row, e.g. the source document) whole groups are held out instead, in a seeded
    order, until `holdout` of the rows are: no group is on both sides."""
    truth = np.asarray(truth, bool)
    rng = np.random.default_rng(seed)
    if groups is not None:
        keys = [str(g) for g in groups]
        order = [sorted(set(keys))[i] for i in rng.permutation(len(set(keys)))]
        held_groups: set[str] = set()
        for group in order[:-1] if holdout > 0 else []:  # the last group always tunes
            if sum(k in held_groups for k in keys) >= holdout * len(keys):
                break
            held_groups.add(group)
        held_rows = [i for i, k in enumerate(keys) if k in held_groups]
        return (np.array([i for i, k in enumerate(keys) if k not in held_groups], dtype=int),
                np.array(held_rows, dtype=int))
    tuning, held = [], []
    for cls in (True, False):
        members = rng.permutation(np.flatnonzero(truth == cls))
        n_held = int(round(holdout * len(members)))
        if holdout > 0 and len(members) >= 2:
            n_held = min(max(n_held, 1), len(members) - 1)
        held += members[:n_held].tolist()
        tuning += members[n_held:].tolist()
    return np.array(sorted(tuning), dtype=int), np.array(sorted(held), dtype=int)
