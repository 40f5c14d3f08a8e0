"""Human-corrected means (prediction-powered inference): on synthetic data with a known truth and a
biased judge, the corrected 95% CI covers the truth in about 95% of the replicates (seeds 0..399),
the judge-only CI almost never; and the estimate is what its definition says."""
import numpy as np
import pytest

from ragexp.stats.ppi import estimates, judge_only, ppi

SEEDS = range(400)


def replicates(draw, questions: int, labelled: int):
    """(judge scores of all questions, judge and people on the labelled ones) per seed, stacked:
    `draw(rng, n)` gives (people, judge) for n questions. The labelled ones are the first
    `labelled`: the draws are independent, so any fixed part is a uniform random one."""
    people, judge = zip(*(draw(np.random.default_rng(seed), questions) for seed in SEEDS))
    people, judge = np.array(people), np.array(judge)
    return judge, judge[:, :labelled], people[:, :labelled]


def one_to_ten(rng, n):
    """People's 1-10 scores, uniform (mean 5.5); a lenient, noisy judge: +1.5 on average, clipped."""
    people = rng.integers(1, 11, size=n).astype(float)
    return people, np.clip(np.round(people + 1.5 + rng.normal(0, 1.2, size=n)), 1, 10)


def hallucination(rng, n):
    """20% of the answers hallucinate; the judge flags 90% of those and 30% of the others."""
    people = (rng.random(n) < 0.2).astype(float)
    flagged = np.where(people == 1, rng.random(n) < 0.9, rng.random(n) < 0.3)
    return people, flagged.astype(float)


@pytest.mark.parametrize("draw, truth, questions, labelled", [
    (one_to_ten, 5.5, 500, 60),
    (hallucination, 0.2, 400, 80),
])
def test_the_corrected_ci_covers_the_truth_about_95_percent_of_the_time(draw, truth, questions, labelled):
    judge_all, judge_labelled, people_labelled = replicates(draw, questions, labelled)
    corrected, half = ppi(judge_all, judge_labelled, people_labelled, 0.95)
    covered = np.mean(np.abs(corrected - truth) <= half)
    alone, alone_half = judge_only(judge_all, 0.95)
    covered_alone = np.mean(np.abs(alone - truth) <= alone_half)
    assert 0.90 <= covered <= 0.99, covered
    assert covered_alone < 0.05, covered_alone  # the judge's bias puts its own CI off the truth
    assert abs(np.mean(corrected) - truth) < abs(np.mean(alone) - truth) / 10  # unbiased, on average


def test_the_corrected_mean_is_the_judge_mean_minus_the_mean_labelled_difference():
    judge = {"a": 8.0, "b": 6.0, "c": 9.0, "d": 5.0}
    people = {"a": 6.0, "b": 5.0, "zzz": 1.0}  # a question the judge did not score is left out
    alone, corrected = estimates(judge, people)
    assert alone.estimate == pytest.approx(7.0) and alone.questions == 4
    assert corrected is not None and corrected.labelled == 2
    assert corrected.estimate == pytest.approx(7.0 - ((8 - 6) + (6 - 5)) / 2)
    assert corrected.low < corrected.estimate < corrected.high
    assert estimates(judge, {"a": 6.0})[1] is None  # one label: no interval can be made


def test_with_every_question_labelled_it_is_the_peoples_mean_and_its_usual_ci():
    rng = np.random.default_rng(7)
    people = rng.integers(1, 11, size=50).astype(float)
    judge = np.clip(people + 2 + rng.normal(0, 1, size=50), 1, 10)
    corrected, half = ppi(judge, judge, people)
    assert corrected == pytest.approx(people.mean())
    assert half == pytest.approx(2.009575 * people.std(ddof=1) / np.sqrt(50), rel=1e-5)  # Student t, 49 df
