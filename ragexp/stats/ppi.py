"""Human-corrected means: prediction-powered inference (PPI; Angelopoulos et al. 2023,
"Prediction-powered inference", Science 382; ARES applies it to RAG judges), one estimator for
people's labels of a run (python -m ragexp.calibrate, compare --labels) and a cascade's sample.

A judge scored all N questions of a run; people (or an expensive judge) labelled some of them,
question i with a known chance pi_i. The judge-only mean is biased by however much the judge is
off; the corrected mean removes that bias:

    corrected = mean(g over all N) + sum(w (y - g)) / sum(w) over the labelled,  w = 1 / pi

g the judge's score f (or a line through it, tuned for a cascade: `ppi_terms`). For people's labels
of a run, every chance is n/N, g = f, and it is the paper's estimate,
mean(judge over all N) - mean(judge - human over the n labelled). Its CI is
corrected +- t * sd(terms) / sqrt(N), each question's term linearised (`hajek`) and t the Student
quantile with labels - 1 degrees of freedom; with every question labelled it is the people's mean
and its usual CI. bench/ppi_coverage.py checks it against the paper's exact variance for a uniform
sample, (N - n)/N^2 Var(judge) + Var(human - (1 - n/N) judge)/n: coverage 93.7% vs 93.9% and mean
width 0.760 vs 0.763 at 60 labels of 500 (2000 seeds). The interval is valid whatever the judge's
bias: a better judge only makes it narrower.

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


def t_value(level: float, freedom):
    """Student's t quantile for a two-sided `level` CI; `freedom` a number or an array of them."""
    from scipy import stats

    return stats.t.ppf(0.5 + level / 2, freedom)


def judge_only(judge_all, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """(mean, half width of its CI, Student t) of the judge's scores over the last axis."""
    scores = np.asarray(judge_all, dtype=float)
    n = scores.shape[-1]
    spread = scores.std(axis=-1, ddof=1) if n > 1 else np.zeros(scores.shape[:-1])
    return scores.mean(axis=-1), (t_value(level, n - 1) if n > 1 else z_value(level)) * spread / np.sqrt(n)


def estimates(judge_by_question: dict[str, float], human_by_question: dict[str, float], level: float = 0.95,
              scale: tuple[float, float] | None = None) -> tuple[MeanEstimate, MeanEstimate | None]:
    """The judge-only mean and the human-corrected (PPI) mean of one metric of a run: the judge's
    score of every judged question, people's of the labelled ones (questions the judge did not
    score are left out), each question labelled with the same chance and the judge's score as it is. No corrected mean with fewer than 2 labelled questions. With the metric's
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
    chosen = set(labelled)
    marked = np.array([q in chosen for q in questions])
    people = np.array([human_by_question.get(q, np.nan) for q in questions], dtype=float)
    mean, half, _ = ppi_sampled(f_all, people, marked, len(labelled) / len(questions), level, tune=False)
    return alone, estimate(mean, half, len(labelled))


# --- labels spent where the judge is unsure: known inclusion probabilities -------------------------
#
# A cascade labels question i (with people, or an expensive judge) with a known probability pi_i,
# larger where the cheap judge is unsure (active statistical inference; Zrnic & Candes 2024). With
# xi_i = 1 when question i was labelled, each question's term
#
#     term_i = g_i + xi_i / pi_i * (y_i - g_i),   g_i = alpha + lam * f_i
#
# has mean E[y_i] whatever the cheap judge's f_i and whatever the line g, so mean(term) is unbiased
# for the labelled value's mean and its CI is mean +- t * sd(term) / sqrt(N) (the terms are
# independent; t with labels - 1 degrees of freedom). ragexp uses its ratio (Hajek) form: the
# correction sum(xi/pi (y - g)) is divided by the weights' realised sum, sum(xi/pi), rather than by
# its expected value N (`hajek`; consistent, and its spread does not carry the chance in how many
# questions happened to be drawn). With pi_i = n/N for all and g = f it is the paper's estimate
# (the plain form, N in the denominator, gave 98.3% coverage and a mean width of 0.972 against 0.763
# at 60 labels of 500 in bench/ppi_coverage.py).
#
# lam = 1 is the plain correction; tuning how far the cheap judge is trusted is PPI++'s power
# tuning (Angelopoulos et al. 2023, "PPI++"). Here the cheap score is recalibrated by a line,
# g_i = alpha + lam * f_i, whose intercept and slope minimise the terms' variance: a judge that
# buys nothing gets lam ~ 0 and alpha ~ the labels' mean, and the estimate's spread is then the
# labels' own (without alpha it would be that of y around 0: 1.13x the plain mean's CI at a 60%
# rate in bench/cascade.py). Any line keeps the terms' mean E[y]; the line is cross-fitted (each
# half of the questions gets the line fitted on the other half): fitted on the same labels, it
# made the CI too narrow with few labels (92.6% coverage at 20 labels in tests/test_ppi.py's
# simulation). Each half keeps its own intercept: one shared by both halves cancels out of the
# ratio form and narrows a useless judge's CI a little, but made a paired test of two
# configurations' terms reject 6.9% of the time at the 5% level (tests/test_ppi.py; 5.2% per half).


FEWEST_EXPENSIVE = 10  # expensive judgements a corrected mean's 95% CI is trusted on: simulated, it covered 96-98% from
# 10 and 81-85% from 5 (tests/test_ppi.py); a race tests no cascade on fewer, the leaderboard says so


def inclusion_probabilities(uncertainty, budget: float, floor: float = 0.0) -> np.ndarray:
    """pi_i proportional to `uncertainty` (>= 0, e.g. sqrt(p (1 - p)) of a judge's probability), each
    in [floor, 1], summing to `budget` (the expected number of labels, at most N): the share a
    question cannot take above 1 goes to the others."""
    u = np.maximum(np.asarray(uncertainty, dtype=float), 0.0)
    n = u.shape[-1]
    if not 0 < budget <= n or not 0 <= floor <= budget / n:
        raise ValueError(f"a budget in (0, {n}] and a floor in [0, budget / N] are needed; got {budget}, {floor}")
    weights = u + 1e-12  # with no uncertainty anywhere, the budget spreads evenly
    pi = np.full(n, floor)
    free = np.ones(n, dtype=bool)  # not yet at 1
    for _ in range(n):
        if not free.any():  # every question is labelled for sure (a budget of N)
            return pi
        left = budget - pi[~free].sum() - floor * free.sum()  # what the free questions share above the floor
        share = np.where(free, floor + left * weights / weights[free].sum(), pi)
        over = free & (share >= 1.0)
        if not over.any():
            return np.clip(share, floor, 1.0)
        pi[over], free[over] = 1.0, False
    return pi


def coordinated_uniform(question_id: str, seed: int = 0) -> float:
    """The question's uniform number in [0, 1): the same for every configuration of a sweep (and
    every rerun), so that configurations label the same questions wherever their probabilities
    allow (question i is labelled where uniform_i < pi_i). Its hash has its own prefix: `question_sample`
    orders questions by the hash of (seed, id), so without it a sample's questions would be the ones
    with the smallest numbers, every one drawn."""
    import hashlib

    digest = hashlib.sha256(f"cascade\0{seed}\0{question_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def ppi_sampled(judge_all, labels, labelled, probabilities, level: float = 0.95, tune: bool = True
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, half width of its CI, the lam used) over the last axis: `judge_all` the cheap
    judge's scores of all N questions, `labels` the labels (any value where not labelled, e.g.
    NaN), `labelled` which were, `probabilities` each question's chance of being labelled (> 0)."""
    terms, lam = ppi_terms(judge_all, labels, labelled, probabilities, tune)
    # Student's t with (labels - 1) degrees of freedom, as for the uniform sample: the spread of
    # the terms rests on the labelled questions, and few labels make the normal z too narrow
    t = t_value(level, np.maximum(np.asarray(labelled, dtype=bool).sum(axis=-1) - 1, 1))
    return terms.mean(axis=-1), t * terms.std(axis=-1, ddof=1) / np.sqrt(terms.shape[-1]), lam


def ppi_terms(judge_all, labels, labelled, probabilities, tune: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Each question's term of `ppi_sampled`'s estimate (their mean is the estimate), and the lam:
    g's mean corrected by the weighted mean of the labelled y_i - g_i (`hajek`), weights 1 / pi_i,
    with g_i = alpha + lam * f_i, the cheap score recalibrated by
    a line whose intercept and slope minimise the terms' variance, cross-fitted (each half of the
    questions gets the line fitted on the other half, so no term's line saw its own label). The
    intercept matters where the cheap judge buys nothing: with lam ~ 0, g is about the labels' mean
    and the terms' spread is the labels' own, as for their plain mean (with g = 0 it would be the
    spread of y around 0). `tune=False`: g = f, the plain correction."""
    f = np.asarray(judge_all, dtype=float)
    xi = np.asarray(labelled, dtype=bool)
    pi = np.broadcast_to(np.asarray(probabilities, dtype=float), f.shape)
    if (pi <= 0).any() or (pi > 1).any():
        raise ValueError("every inclusion probability must be in (0, 1]")
    y = np.where(xi, np.asarray(labels, dtype=float), 0.0)
    weight = xi / pi
    rest, b = 1 - weight, weight * y  # term = (alpha + lam * f) * rest + b
    if not tune:
        return hajek(f, y, xi, weight), np.ones(f.shape[:-1])
    half = np.arange(f.shape[-1]) % 2 == 0
    fits = [best_line(rest[..., ~part], f[..., ~part] * rest[..., ~part], b[..., ~part]) for part in (half, ~half)]
    alpha = np.where(half, fits[0][0][..., None], fits[1][0][..., None])
    lam_each = np.where(half, fits[0][1][..., None], fits[1][1][..., None])
    return hajek(alpha + lam_each * f, y, xi, weight), (fits[0][1] + fits[1][1]) / 2


def hajek(g, y, labelled, weight) -> np.ndarray:
    """Each question's term of g's mean corrected by the weighted mean of the labelled residuals
    y - g (weights 1 / pi): mean(g) + sum(w (y - g)) / sum(w), the correction divided by the weights'
    realised sum rather than its expected N (Hajek's ratio form of the inverse-probability mean). Its
    terms are linearised so that their spread gives the estimate's variance:
    g_i + r + N / sum(w) * w_i * (y_i - g_i - r), r the weighted mean residual. Without labels, g."""
    total = weight.sum(axis=-1, keepdims=True)
    safe = np.where(total > 0, total, 1.0)
    residual = np.where(labelled, y - g, 0.0)
    mean_residual = (weight * residual).sum(axis=-1, keepdims=True) / safe
    return g + mean_residual + g.shape[-1] / safe * weight * (residual - mean_residual)


def best_line(a1: np.ndarray, a2: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(alpha, lam) minimising the variance of alpha * a1 + lam * a2 + b over the last axis (least
    squares on the centred columns; lam alone when a2 is collinear with a1, e.g. a constant judge)."""
    def centred(x):
        return x - x.mean(axis=-1, keepdims=True)

    c1, c2, cb = centred(a1), centred(a2), centred(b)
    s11, s22, s12 = (c1 * c1).mean(-1), (c2 * c2).mean(-1), (c1 * c2).mean(-1)
    s1b, s2b = (c1 * cb).mean(-1), (c2 * cb).mean(-1)
    det = s11 * s22 - s12 ** 2
    ok = det > 1e-12 * np.maximum(s11 * s22, 1e-300)
    safe = np.where(ok, det, 1.0)
    alpha = np.where(ok, -(s22 * s1b - s12 * s2b) / safe, np.where(s11 > 0, -s1b / np.where(s11 > 0, s11, 1), 0.0))
    lam = np.where(ok, -(s11 * s2b - s12 * s1b) / safe, 0.0)
    return alpha, lam
