"""How well the judge agrees with people, metric by metric, and people with each other.

Judge vs people, on the questions that both scored (the people's label of a question is the mean
over its annotators):
- `spearman`, `kendall` (tau-b): rank agreement (scipy.stats);
- `kappa`: Cohen's kappa with quadratic weights (scikit-learn) on the points of the judge's scale:
  the whole numbers of a 1-10 or 1-5 scale, steps of 0.25 on a 0-1 scale (both values rounded to
  the nearest point, halves up);
- `mae`: mean |judge - people|; `bias`: mean (judge - people), > 0 when the judge scores higher:
  more lenient, or, for a metric where higher is worse (hallucination), stricter (`leniency`).
Each has a percentile bootstrap CI over questions. Beside them, the metric's mean over all the
run's judged questions, by the judge alone and human-corrected (prediction-powered inference, see
`ragexp.stats.ppi`), each with its 95% CI. People vs people, when a metric has two or more
annotators: Krippendorff's alpha (interval; the `krippendorff` package) and the mean pairwise
quadratic kappa: the ceiling a judge can be expected to reach."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from ragexp.base.names import higher_is_worse
from ragexp.store.labels import Label
from ragexp.stats.ppi import MeanEstimate, estimates
from ragexp.calibrate.source import JudgedRun
from ragexp.stats.inference import Interval, percentile_interval

STATISTICS = ("spearman", "kendall", "kappa", "mae", "bias")


def leniency(metric: str, bias: float) -> str:
    """What a judge's `bias` on `metric` means in words."""
    if bias == 0:
        return "scores as people do on average"
    lenient = (bias > 0) != higher_is_worse(metric)
    return "more lenient than people" if lenient else "stricter than people"


def is_yes_no(*values: np.ndarray) -> bool:
    """Whether the values are all 0 or 1 (a yes/no label and verdict)."""
    return all(np.isin(np.asarray(v, dtype=float), (0.0, 1.0)).all() for v in values)


def scale_points(scale: tuple[float, float]) -> np.ndarray:
    lo, hi = scale
    step = 1.0 if hi - lo >= 2 else 0.25 * (hi - lo)
    return np.round(np.arange(lo, hi + step / 2, step), 6)


def snap(values: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Each value replaced by the index of the nearest scale point (halves round up: 7.5 -> 8)."""
    step = points[1] - points[0]
    index = np.floor((np.asarray(values, dtype=float) - points[0]) / step + 0.5 + 1e-9)
    return np.clip(index, 0, len(points) - 1).astype(int)


def statistic(name: str, judge: np.ndarray, people: np.ndarray, points: np.ndarray) -> float:
    from scipy import stats
    from sklearn.metrics import cohen_kappa_score

    if name == "mae":
        return float(np.mean(np.abs(judge - people)))
    if name == "bias":
        return float(np.mean(judge - people))
    if len(judge) < 2:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a constant column: the statistic is undefined (nan)
        if name == "spearman":
            return float(stats.spearmanr(judge, people).statistic)
        if name == "kendall":
            return float(stats.kendalltau(judge, people).statistic)
        labels = list(range(len(points)))
        return float(cohen_kappa_score(snap(judge, points), snap(people, points), labels=labels, weights="quadratic"))


@dataclass
class MetricAgreement:
    metric: str
    scale: tuple[float, float]
    questions: int  # judged questions with a human label
    annotators: int
    judge_vs_people: dict[str, Interval] = field(default_factory=dict)
    alpha: float | None = None  # Krippendorff's alpha between annotators
    pairwise_kappa: float | None = None  # mean quadratic kappa over annotator pairs
    pairs: tuple[np.ndarray, np.ndarray] = (np.empty(0), np.empty(0))  # (judge, people) per question
    judge_mean: MeanEstimate | None = None  # the judge's mean over every judged question of the run
    corrected_mean: MeanEstimate | None = None  # that mean corrected by the labelled questions (PPI)

    def row(self) -> dict:
        cells = {"metric": self.metric, "scale": f"{self.scale[0]:g}-{self.scale[1]:g}", "questions": self.questions,
                 "annotators": self.annotators}
        for name, interval in self.judge_vs_people.items():
            cells[name] = interval.estimate
            cells[f"{name}_ci"] = [interval.low, interval.high]
        cells["krippendorff_alpha"] = self.alpha
        cells["pairwise_kappa"] = self.pairwise_kappa
        cells["judge_mean"] = self.judge_mean.to_json() if self.judge_mean else None
        cells["corrected_mean"] = self.corrected_mean.to_json() if self.corrected_mean else None
        return cells


def bootstrap(name: str, judge: np.ndarray, people: np.ndarray, points: np.ndarray, resamples: int, seed: int,
              level: float) -> Interval:
    estimate = statistic(name, judge, people, points)
    if len(judge) < 3:
        return Interval(estimate, estimate, estimate)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(judge), size=(resamples, len(judge)))
    samples = np.array([statistic(name, judge[d], people[d], points) for d in draws])
    if np.all(np.isnan(samples)):
        return Interval(estimate, float("nan"), float("nan"))
    return percentile_interval(estimate, samples, level)


def between_people(by_annotator: dict[str, dict[str, float]], points: np.ndarray) -> tuple[float | None, float | None]:
    """(Krippendorff's alpha, mean pairwise kappa) of two or more annotators, else (None, None)."""
    if len(by_annotator) < 2:
        return None, None
    import krippendorff

    questions = sorted({q for labels in by_annotator.values() for q in labels})
    matrix = np.array([[labels.get(q, np.nan) for q in questions] for labels in by_annotator.values()])
    alpha = None
    if np.sum(np.sum(~np.isnan(matrix), axis=0) >= 2) >= 2 and len(np.unique(matrix[~np.isnan(matrix)])) > 1:
        alpha = float(krippendorff.alpha(reliability_data=matrix, level_of_measurement="interval"))
    kappas = []
    for a, b in combinations(by_annotator.values(), 2):
        common = sorted(set(a) & set(b))
        if len(common) >= 2:
            kappa = statistic("kappa", np.array([a[q] for q in common]), np.array([b[q] for q in common]), points)
            if not np.isnan(kappa):
                kappas.append(kappa)
    return alpha, (float(np.mean(kappas)) if kappas else None)


def measure(run: JudgedRun, labels: list[Label], resamples: int = 2000, seed: int = 0,
            level: float = 0.95) -> list[MetricAgreement]:
    judged = run.judged()
    scores = {metric: dict(zip(judged["question_id"].astype(str), judged[metric].astype(float)))
              for metric in run.metrics}
    results = []
    for metric in dict.fromkeys(label.metric for label in labels):
        by_annotator: dict[str, dict[str, float]] = {}
        for label in labels:
            if label.metric == metric:
                by_annotator.setdefault(label.annotator, {})[label.question_id] = label.value
        people_by_question: dict[str, list[float]] = {}
        for answers in by_annotator.values():
            for qid, value in answers.items():
                people_by_question.setdefault(qid, []).append(value)
        common = [q for q in people_by_question if q in scores.get(metric, {})]
        judge = np.array([scores[metric][q] for q in common], dtype=float)
        people = np.array([np.mean(people_by_question[q]) for q in common], dtype=float)
        points = scale_points(run.scales[metric])
        result = MetricAgreement(metric, run.scales[metric], len(common), len(by_annotator), pairs=(judge, people))
        if common:
            result.judge_vs_people = {name: bootstrap(name, judge, people, points, resamples, seed, level)
                                      for name in STATISTICS}
        result.alpha, result.pairwise_kappa = between_people(by_annotator, points)
        if scores.get(metric):
            people_mean = {q: float(np.mean(values)) for q, values in people_by_question.items()}
            result.judge_mean, result.corrected_mean = estimates(scores[metric], people_mean, level, run.scales[metric])
        results.append(result)
    return results
