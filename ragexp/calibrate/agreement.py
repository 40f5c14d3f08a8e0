"""How well the judge agrees with people, metric by metric, people with each other, and the judge
with itself.

Judge vs people, on the questions that both scored (the people's label of a question is the mean
over its annotators):
- `spearman`, `kendall` (tau-b): rank agreement (scipy.stats);
- `kappa`: Cohen's kappa on the points of the judge's scale: quadratic weights on
  a scale (the whole numbers of 1-10 or 1-5, steps of 0.25 on 0-1; both values rounded to the
  nearest point, halves up), unweighted on a yes/no metric (a verdict: the judge's share of
  repeats that said yes counts as yes from 0.5), where `agreement` (the share of questions on
  which both say the same), `prevalence` (the share people say yes to) and `judge_prevalence`
  stand beside it: at a prevalence near 0 or 1 kappa stays low however often they agree
  (Feinstein & Cicchetti 1990), so it is never read alone;
- `alpha`: Krippendorff's alpha with the judge and the people as two coders, at the metric's level
  (`level_of`: nominal for yes/no, ordinal for a scale of whole points (1-5, 1-10), interval for a
  continuous 0-1 scale);
- `mae`: mean |judge - people|; `bias`: mean (judge - people), > 0 when the judge scores higher:
  more lenient, or, for a metric where higher is worse (hallucination), stricter (`leniency`).
Each has a percentile bootstrap CI over questions (seeded: the same figures every time). Beside
them, the metric's mean over all the run's judged questions, by the judge alone and human-corrected
(prediction-powered inference, see `ragexp.stats.ppi`), each with its 95% CI. People vs people,
when a metric has two or more annotators: Krippendorff's alpha at the metric's level (the
`krippendorff` package) and the mean pairwise kappa (weighted as above), each with its bootstrap
CI over questions: the ceiling a judge can be expected to reach. The judge vs itself
(`self_agreement`), when it judged each question several times (`judge.repeats`): per metric, the
share of questions whose repeats land on different points of the scale (a flip; Wilson CI), those
questions, and alpha with the repeats as coders."""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from itertools import combinations
from typing import Callable, Literal

import numpy as np

from ragexp.base.names import higher_is_worse
from ragexp.store.labels import Label
from ragexp.stats.ppi import MeanEstimate, estimates
from ragexp.calibrate.source import JudgedRun
from ragexp.stats.inference import Interval, percentile_interval

STATISTICS = ("spearman", "kendall", "kappa", "alpha", "mae", "bias")
YES_NO_STATISTICS = ("agreement", "prevalence", "judge_prevalence")  # beside kappa on a yes/no metric
YES_NO = np.array([0.0, 1.0])


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


@dataclass(frozen=True)
class Level:
    """How a metric's values are compared: `name` is Krippendorff's level of measurement
    (nominal, ordinal or interval), `points` the scale's points the values are rounded to
    (nominal and ordinal; none for interval, whose values are taken as they are)."""

    name: Literal["nominal", "ordinal", "interval"]
    points: np.ndarray | None

    @property
    def yes_no(self) -> bool:
        return self.name == "nominal"

    def coded(self, values: np.ndarray) -> np.ndarray:
        """The values as alpha and kappa compare them: the index of their point, or themselves."""
        values = np.asarray(values, dtype=float)
        if self.points is None:
            return values
        coded = snap(np.nan_to_num(values), self.points).astype(float)
        coded[np.isnan(values)] = np.nan
        return coded


def level_of(scale: tuple[float, float], *values: np.ndarray) -> Level:
    """Nominal for a yes/no metric (a 0-1 scale whose values are all 0 or 1), ordinal for a scale of
    whole points (1-5, 1-10, a rubric's levels), interval for a continuous 0-1 scale."""
    lo, hi = scale
    if (lo, hi) == (0.0, 1.0) and is_yes_no(*(v[~np.isnan(v)] for v in map(np.asarray, values))):
        return Level("nominal", YES_NO)
    if hi - lo >= 2:
        return Level("ordinal", scale_points(scale))
    return Level("interval", None)


def cohen_kappa(a: np.ndarray, b: np.ndarray, categories: int, quadratic: bool = False) -> float:
    """Cohen's kappa of two coders' category indices (0 .. categories-1), unweighted or with
    quadratic weights (as scikit-learn's cohen_kappa_score, without its checks: it runs once per
    bootstrap resample); nan when chance alone explains every agreement (one category only)."""
    table = np.bincount(np.asarray(a) * categories + np.asarray(b), minlength=categories * categories)
    table = table.reshape(categories, categories).astype(float)
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / table.sum()
    steps = np.subtract.outer(np.arange(categories), np.arange(categories))
    weights = steps.astype(float) ** 2 if quadratic else (steps != 0).astype(float)
    chance = float((weights * expected).sum())
    return 1 - float((weights * table).sum()) / chance if chance > 0 else float("nan")


def unweighted_kappa(a: np.ndarray, b: np.ndarray, categories: int) -> float:
    """Cohen's kappa of two coders' category indices (0 .. categories-1), no weights."""
    return cohen_kappa(a, b, categories)


def kappa(a: np.ndarray, b: np.ndarray, level: Level, points: np.ndarray) -> float:
    """Cohen's kappa on the scale's points: unweighted at the nominal level (yes/no), quadratic
    weights otherwise."""
    if level.name == "nominal" and level.points is not None:
        return cohen_kappa(snap(a, level.points), snap(b, level.points), len(level.points))
    return cohen_kappa(snap(a, points), snap(b, points), len(points), quadratic=True)


class Reliability:
    """Krippendorff's alpha of a coders x units matrix (NaN: no value), at a level, and of any
    resample of its units: the matrix is turned into value counts (units x values) once, and a
    resample draws rows of them."""

    def __init__(self, matrix: np.ndarray, level: Level):
        coded = np.stack([level.coded(row) for row in np.atleast_2d(np.asarray(matrix, dtype=float))])
        self.level = level
        self.domain = (np.arange(len(level.points), dtype=float) if level.points is not None
                       else np.unique(coded[~np.isnan(coded)]))
        self.counts = (coded[None, :, :] == self.domain[:, None, None]).sum(axis=1).T  # units x values

    @property
    def units(self) -> int:
        return len(self.counts)

    def pairable(self, rows: np.ndarray | None = None) -> bool:
        """At least two units with two values each, and more than one value among them."""
        counts = self.counts if rows is None else self.counts[rows]
        paired = counts[counts.sum(axis=1) >= 2]
        return len(paired) >= 2 and int((paired.sum(axis=0) > 0).sum()) > 1

    def alpha(self, rows: np.ndarray | None = None) -> float:
        import krippendorff

        if not self.pairable(rows):
            return float("nan")
        counts = self.counts if rows is None else self.counts[rows]
        with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
            warnings.simplefilter("ignore")
            return float(krippendorff.alpha(value_counts=counts, value_domain=self.domain,
                                            level_of_measurement=self.level.name))

    def interval(self, resamples: int, seed: int, level: float) -> Interval | None:
        """Alpha with its percentile bootstrap CI over units; None when no two units are pairable."""
        estimate = self.alpha()
        if estimate != estimate:
            return None
        return resampled(lambda rows: self.alpha(rows), self.units, estimate, resamples, seed, level)


def resampled(statistic: Callable[[np.ndarray], float], n: int, estimate: float, resamples: int, seed: int,
              level: float) -> Interval:
    """The percentile bootstrap CI of `statistic(rows)` over n units (rows drawn with replacement, seeded)."""
    if n < 3:
        return Interval(estimate, estimate, estimate)
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    samples = np.array([statistic(np.sort(d)) for d in draws])
    if np.all(np.isnan(samples)):
        return Interval(estimate, float("nan"), float("nan"))
    return percentile_interval(estimate, samples, level)


def statistic(name: str, judge: np.ndarray, people: np.ndarray, points: np.ndarray, level: Level | None = None) -> float:
    """One judge-vs-people statistic on paired values (`level`: the metric's, `level_of` by default)."""
    from scipy import stats

    level = level or level_of((float(points[0]), float(points[-1])), judge, people)
    if name == "mae":
        return float(np.mean(np.abs(judge - people)))
    if name == "bias":
        return float(np.mean(judge - people))
    if name in YES_NO_STATISTICS:
        verdicts, labels = snap(judge, YES_NO), snap(people, YES_NO)
        return float(np.mean({"agreement": verdicts == labels, "prevalence": labels, "judge_prevalence": verdicts}[name]))
    if len(judge) < 2:
        return float("nan")
    if name == "alpha":
        return Reliability(np.stack([judge, people]), level).alpha()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a constant column: the statistic is undefined (nan)
        if name == "spearman":
            return float(stats.spearmanr(judge, people).statistic)
        if name == "kendall":
            return float(stats.kendalltau(judge, people).statistic)
    return kappa(judge, people, level, points)


@dataclass
class MetricAgreement:
    metric: str
    scale: tuple[float, float]
    questions: int  # judged questions with a human label
    annotators: int
    judge_vs_people: dict[str, Interval] = field(default_factory=dict)
    alpha: Interval | None = None  # Krippendorff's alpha between annotators (at `level`)
    pairwise_kappa: Interval | None = None  # mean kappa over annotator pairs
    pairs: tuple[np.ndarray, np.ndarray] = (np.empty(0), np.empty(0))  # (judge, people) per question
    judge_mean: MeanEstimate | None = None  # the judge's mean over every judged question of the run
    corrected_mean: MeanEstimate | None = None  # that mean corrected by the labelled questions (PPI)
    level: str = ""  # Krippendorff's level of measurement of the metric: nominal, ordinal or interval

    @property
    def yes_no(self) -> bool:
        return self.level == "nominal"

    def row(self) -> dict:
        cells = {"metric": self.metric, "scale": f"{self.scale[0]:g}-{self.scale[1]:g}", "questions": self.questions,
                 "annotators": self.annotators, "level": self.level,
                 "kappa_weights": "none" if self.yes_no else "quadratic"}
        for name, interval in self.judge_vs_people.items():
            cells[name] = interval.estimate
            cells[f"{name}_ci"] = [interval.low, interval.high]
        for name, ceiling in (("krippendorff_alpha", self.alpha), ("pairwise_kappa", self.pairwise_kappa)):
            cells[name] = ceiling.estimate if ceiling else None
            cells[f"{name}_ci"] = [ceiling.low, ceiling.high] if ceiling else None
        cells["judge_mean"] = self.judge_mean.to_json() if self.judge_mean else None
        cells["corrected_mean"] = self.corrected_mean.to_json() if self.corrected_mean else None
        return cells


def bootstrap(name: str, judge: np.ndarray, people: np.ndarray, points: np.ndarray, resamples: int, seed: int,
              level: float, measured: Level | None = None) -> Interval:
    """A judge-vs-people statistic with its percentile bootstrap CI over questions; `measured`: the
    metric's level, the same in every resample."""
    measured = measured or level_of((float(points[0]), float(points[-1])), judge, people)
    estimate = statistic(name, judge, people, points, measured)
    return resampled(lambda d: statistic(name, judge[d], people[d], points, measured), len(judge), estimate,
                     resamples, seed, level)


def mean_pairwise_kappa(matrix: np.ndarray, rows: np.ndarray, level: Level, points: np.ndarray) -> float:
    """The mean kappa over annotator pairs (rows of `matrix`, annotators x questions, NaN: no label)
    on the questions `rows` (indices, repeats allowed) that both labelled, two at least."""
    kappas = []
    for a, b in combinations(matrix, 2):
        both = rows[~np.isnan(a[rows]) & ~np.isnan(b[rows])]
        if len(both) >= 2:
            value = kappa(a[both], b[both], level, points)
            if value == value:
                kappas.append(value)
    return float(np.mean(kappas)) if kappas else float("nan")


def between_people(by_annotator: dict[str, dict[str, float]], points: np.ndarray, level: Level | None = None,
                   resamples: int = 2000, seed: int = 0, ci: float = 0.95) -> tuple[Interval | None, Interval | None]:
    """(Krippendorff's alpha, mean pairwise kappa) of two or more annotators at the metric's level,
    each with its bootstrap CI over questions; (None, None) with fewer than two annotators, and
    None for a figure that is undefined (no two questions labelled twice, one value only)."""
    if len(by_annotator) < 2:
        return None, None
    questions = sorted({q for labels in by_annotator.values() for q in labels})
    matrix = np.array([[labels.get(q, np.nan) for q in questions] for labels in by_annotator.values()])
    level = level or level_of((float(points[0]), float(points[-1])), matrix)
    alpha = Reliability(matrix, level).interval(resamples, seed, ci)
    estimate = mean_pairwise_kappa(matrix, np.arange(len(questions)), level, points)
    pairwise = None if estimate != estimate else resampled(
        lambda rows: mean_pairwise_kappa(matrix, rows, level, points), len(questions), estimate, resamples, seed, ci)
    return alpha, pairwise


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
        measured = level_of(run.scales[metric], np.array([v for vs in people_by_question.values() for v in vs]))
        result = MetricAgreement(metric, run.scales[metric], len(common), len(by_annotator), pairs=(judge, people),
                                 level=measured.name)
        if common:
            names = STATISTICS + (YES_NO_STATISTICS if measured.yes_no else ())
            result.judge_vs_people = {name: bootstrap(name, judge, people, points, resamples, seed, level, measured)
                                      for name in names}
        result.alpha, result.pairwise_kappa = between_people(by_annotator, points, measured, resamples, seed, level)
        if scores.get(metric):
            people_mean = {q: float(np.mean(values)) for q, values in people_by_question.items()}
            result.judge_mean, result.corrected_mean = estimates(scores[metric], people_mean, level, run.scales[metric])
        results.append(result)
    return results


@dataclass
class SelfAgreement:
    """The judge against itself on one metric, over the questions it judged `repeats` times."""

    metric: str
    level: str  # Krippendorff's level the repeats are compared at
    repeats: int  # the most repeats of a question
    questions: int  # questions judged at least twice
    flip_rate: Interval  # share of those whose repeats land on different points (Wilson CI)
    flipped: list[str]  # their ids, in the run's order
    alpha: Interval | None  # Krippendorff's alpha with the repeats as coders

    def row(self) -> dict:
        return {"metric": self.metric, "level": self.level, "repeats": self.repeats, "questions": self.questions,
                "flip_rate": self.flip_rate.estimate, "flip_rate_ci": [self.flip_rate.low, self.flip_rate.high],
                "flipped": self.flipped, "alpha": self.alpha.estimate if self.alpha else None,
                "alpha_ci": [self.alpha.low, self.alpha.high] if self.alpha else None}


def repeat_values(cell, metric: str | None) -> list[float]:
    """One question's values of `metric` over its repeats, from the table's `repeat_scores` cell
    (a list of {metric: score}, or that list as JSON text); `metric` None: a `repeat_hallucination`
    cell (a list of yes/no verdicts)."""
    if isinstance(cell, str):
        try:
            cell = json.loads(cell)
        except json.JSONDecodeError:
            return []
    if not isinstance(cell, (list, tuple)):
        return []
    if metric is None:
        return [float(v) for v in cell if isinstance(v, (bool, int, float))]
    return [float(r[metric]) for r in cell if isinstance(r, dict) and isinstance(r.get(metric), (int, float))
            and not isinstance(r.get(metric), bool) and r[metric] == r[metric]]


def wilson(successes: int, n: int, level: float) -> Interval:
    from scipy.stats import binomtest

    ci = binomtest(successes, n).proportion_ci(confidence_level=level, method="wilson")
    return Interval(successes / n, float(ci.low), float(ci.high))


def self_agreement(run: JudgedRun, resamples: int = 2000, seed: int = 0, level: float = 0.95) -> list[SelfAgreement]:
    """Per judge metric (and the hallucination verdict), how often the judge's repeats of a question
    disagree: none when the run's judge ran once per question (`judge.repeats` 1)."""
    table = run.judged()
    if "repeat_scores" not in table:
        return []
    ids = table["question_id"].astype(str).tolist()
    columns: list[tuple[str, str, str | None]] = [(metric, "repeat_scores", metric) for metric in run.scales
                                                  if metric != "hallucination"]
    if "repeat_hallucination" in table and "hallucination" in run.scales:
        columns.append(("hallucination", "repeat_hallucination", None))
    found = []
    for metric, column, key in columns:
        values = {q: v for q, cell in zip(ids, table[column]) if len(v := repeat_values(cell, key)) >= 2}
        if not values:
            continue
        width = max(len(v) for v in values.values())
        matrix = np.full((width, len(values)), np.nan)
        for i, v in enumerate(values.values()):
            matrix[:len(v), i] = v
        measured = level_of(run.scales[metric], matrix.ravel())
        coded = np.stack([measured.coded(row) for row in matrix])
        if measured.points is None:  # a continuous 0-1 score: a flip is a move to another of its quarter points
            coded = np.stack([Level("ordinal", scale_points(run.scales[metric])).coded(row) for row in matrix])
        flips = [q for i, q in enumerate(values) if len(np.unique(coded[~np.isnan(coded[:, i]), i])) > 1]
        found.append(SelfAgreement(metric, measured.name, width, len(values), wilson(len(flips), len(values), level),
                                   flips, Reliability(matrix, measured).interval(resamples, seed, level)))
    return found
