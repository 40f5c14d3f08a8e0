"""Human-corrected means: prediction-powered inference (PPI; Angelopoulos et al. 2023,
"Prediction-powered inference", Science 382; ARES applies it to RAG judges).

A judge scored all N questions of a run; people labelled a random subset of n of them. The
judge-only mean is biased by however much the judge is off; the PPI estimate removes that bias:

    corrected = mean(judge over all N) - mean(judge - human over the n labelled)

Its variance, with the labelled questions a uniform random part of the N (they count in both
means), is exactly

    Var = (N - n) / N^2 * Var(judge) + Var(human - (1 - n/N) * judge) / n

(the labelled question i enters as judge_i/N - (judge_i - human_i)/n; the others as judge_i/N),
estimated from the data, and the interval is corrected +- t * sqrt(Var), t the Student quantile
with n - 1 degrees of freedom (the paper's normal z, a little wider for few labels: with 20 labels
its coverage in bench/ppi_coverage.py is 94.5% instead of z's 93.5%). With n = N it is the
people's mean and its usual CI; with n << N it is the paper's sigma_f^2/N + sigma_r^2/n.
The interval is valid whatever the judge's bias: a better judge only makes it narrower.

Every function works on the last axis, so a simulation passes (replicates, N) arrays at once."""
from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np


@dataclass(frozen=True)
class MeanEstimate:
    """A mean with its CI; `labelled` people's labels went into it (0: the judge alone)."""

    estimate: float
    low: float
    high: float
    questions: int
    labelled: int = 0

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def shown(self) -> str:
        return f"{self.estimate:.3f} [{self.low:.3f}, {self.high:.3f}]"

    def to_json(self) -> dict:
        return {"estimate": self.estimate, "ci": [self.low, self.high], "questions": self.questions,
                "labelled": self.labelled}


def z_value(level: float) -> float:
    return NormalDist().inv_cdf(0.5 + level / 2)


def t_value(level: float, freedom: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, freedom))


def judge_only(judge_all, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """(mean, half width of its CI, Student t) of the judge's scores over the last axis."""
    scores = np.asarray(judge_all, dtype=float)
    n = scores.shape[-1]
    spread = scores.std(axis=-1, ddof=1) if n > 1 else np.zeros(scores.shape[:-1])
    return scores.mean(axis=-1), (t_value(level, n - 1) if n > 1 else z_value(level)) * spread / np.sqrt(n)


def ppi(judge_all, judge_labelled, human_labelled, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """(corrected mean, half width of its CI) over the last axis: `judge_all` the judge's scores of
    all N questions, `judge_labelled` / `human_labelled` the judge's and people's scores of the n
    labelled ones (a part of the N), on one scale."""
    f_all = np.asarray(judge_all, dtype=float)
    f_lab, y_lab = np.asarray(judge_labelled, dtype=float), np.asarray(human_labelled, dtype=float)
    big_n, n = f_all.shape[-1], f_lab.shape[-1]
    if n < 2 or n > big_n:
        raise ValueError(f"PPI needs 2 to N labelled questions, got {n} of {big_n}")
    corrected = f_all.mean(axis=-1) - (f_lab - y_lab).mean(axis=-1)
    var_judge = f_all.var(axis=-1, ddof=1) if big_n > 1 else np.zeros(corrected.shape)
    var_rectifier = (y_lab - (1 - n / big_n) * f_lab).var(axis=-1, ddof=1)
    variance = (big_n - n) / big_n**2 * var_judge + var_rectifier / n
    return corrected, t_value(level, n - 1) * np.sqrt(variance)


def estimates(judge_by_question: dict[str, float], human_by_question: dict[str, float], level: float = 0.95,
              scale: tuple[float, float] | None = None) -> tuple[MeanEstimate, MeanEstimate | None]:
    """The judge-only mean and the human-corrected (PPI) mean of one metric of a run: the judge's
    score of every judged question, people's of the labelled ones (questions the judge did not
    score are left out). No corrected mean with fewer than 2 labelled questions. With the metric's
    `scale`, the CIs are cut to it (the mean cannot leave it: still valid, and easier to read)."""
    lo, hi = scale if scale is not None else (-np.inf, np.inf)

    def estimate(mean, half, labelled: int = 0) -> MeanEstimate:
        return MeanEstimate(float(mean), float(max(lo, mean - half)), float(min(hi, mean + half)), len(f_all), labelled)

    questions = list(judge_by_question)
    f_all = np.array([judge_by_question[q] for q in questions], dtype=float)
    alone = estimate(*judge_only(f_all, level))
    labelled = [q for q in human_by_question if q in judge_by_question]
    if len(labelled) < 2:
        return alone, None
    f_lab = np.array([judge_by_question[q] for q in labelled], dtype=float)
    y_lab = np.array([human_by_question[q] for q in labelled], dtype=float)
    return alone, estimate(*ppi(f_all, f_lab, y_lab, level), len(labelled))
