"""The resampling statistics on cases whose answer is known."""
import numpy as np
import pytest

from ragexp.compare.metrics import MetricSpec
from ragexp.stats.inference import bootstrap_ci, holm, mean_of, paired_test


@pytest.fixture
def scores():
    return np.random.default_rng(7).uniform(1, 10, size=40)


def test_identical_runs_are_indistinguishable(scores):
    test = paired_test(scores, scores.copy(), resamples=2000)
    assert test.p_value == pytest.approx(1.0)
    assert test.difference.estimate == 0 and test.difference.contains(0.0)
    assert test.n == 40


def test_a_run_higher_on_every_question_is_significant(scores):
    better = scores + 0.5
    test = paired_test(better, scores, resamples=10_000)
    assert test.p_value < 0.01
    assert test.difference.estimate == pytest.approx(0.5)
    assert test.difference.low == pytest.approx(0.5) and test.difference.high == pytest.approx(0.5)


def test_noisy_improvement_has_a_ci_that_excludes_zero_and_a_small_p(scores):
    noise = np.random.default_rng(1).normal(0, 0.3, size=len(scores))
    test = paired_test(scores + 1.0 + noise, scores, resamples=5000)
    assert test.p_value < 0.01 and test.difference.low > 0.5


def test_permutation_p_value_matches_the_exact_one():
    # 5 questions, each +1: only "no swap" and "swap all" reach |mean difference| = 1, so p = 2/32
    a, b = np.arange(5.0) + 1, np.arange(5.0)
    assert paired_test(a, b, resamples=20_000, seed=3).p_value == pytest.approx(2 / 32, abs=0.006)


def test_bootstrap_is_reproducible_with_a_seed(scores):
    first = bootstrap_ci(scores, resamples=3000, seed=11)
    assert bootstrap_ci(scores, resamples=3000, seed=11) == first
    assert bootstrap_ci(scores, resamples=3000, seed=12) != first
    assert paired_test(scores + 0.1, scores, seed=5, resamples=500) == paired_test(scores + 0.1, scores, seed=5, resamples=500)


def test_bootstrap_ci_of_a_mean_has_the_textbook_width():
    x = np.random.default_rng(0).normal(5.0, 2.0, size=400)
    ci = bootstrap_ci(x, resamples=10_000, seed=0)
    assert ci.estimate == pytest.approx(x.mean())
    assert ci.low < x.mean() < ci.high
    assert ci.high - ci.low == pytest.approx(2 * 1.96 * x.std(ddof=1) / np.sqrt(len(x)), rel=0.1)


def test_overall_score_statistic_is_the_runs_formula():
    # columns: context_relevance, answer_similarity, faithfulness, hallucination
    x = np.array([[5.0, 8.0, 10.0, 0.0], [3.0, 6.0, 7.0, 1.0], [7.0, 9.0, 10.0, 0.0], [4.0, 5.0, 10.0, 0.0]])
    spec = MetricSpec("overall_score", ("context_relevance", "answer_similarity", "faithfulness", "hallucination"),
                      "overall", weights=(0.3, 0.4, 0.3), penalty=True)
    means = x.mean(0)
    expected = (means[:3] @ [0.3, 0.4, 0.3]) * (1 - means[3])
    ci = bootstrap_ci(x, spec.statistic(len(x)), resamples=2000)
    assert ci.estimate == pytest.approx(expected)
    assert paired_test(x, x, spec.statistic(len(x)), resamples=500).p_value == pytest.approx(1.0)


def test_a_sum_statistic_scales_with_the_questions():
    x = np.array([0.01, 0.02, 0.03, 0.04])
    spec = MetricSpec("judge_cost_usd", ("judge_cost_usd",), "sum")
    assert bootstrap_ci(x, spec.statistic(4), resamples=100).estimate == pytest.approx(0.10)
    assert bootstrap_ci(x, mean_of(), resamples=100).estimate == pytest.approx(0.025)


def test_holm_by_hand():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> kept monotone: 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []
    adjusted = holm([0.02, float("nan")])
    assert adjusted[0] == pytest.approx(0.02) and np.isnan(adjusted[1])


@pytest.mark.parametrize("kept", [True, False])
def test_bootstrap_ci_draws_the_same_resamples_whether_its_weights_are_kept_or_not(kept, monkeypatch):
    """The leaderboard's CIs reuse one draw of resample weights for every metric of every run with
    the same number of questions: each CI is what a draw of its own gives."""
    import numpy as np

    from ragexp.stats import inference

    monkeypatch.setattr(inference, "KEPT_WEIGHTS", 10**9 if kept else 0)
    rng = np.random.default_rng(5)
    for x in (rng.random(40), rng.integers(0, 2, 40), rng.random(7)):
        own = np.random.default_rng(3)
        samples = np.concatenate([(inference.bootstrap_weights(own, size, len(x)) @ x) / len(x)
                                  for size in (2000, 2000, 1000)])
        low, high = np.nanpercentile(samples, [2.5, 97.5])
        ci = bootstrap_ci(x, resamples=5000, seed=3)
        assert (ci.low, ci.high) == (low, high)
        assert bootstrap_ci(x, resamples=5000, seed=3) == ci  # and again, from the kept weights


def test_a_tables_columns_are_read_as_numbers_once_and_never_for_another_table():
    import gc

    import pandas as pd

    from ragexp.compare.metrics import _CONVERTED, numeric, numeric_column

    for round_ in range(50):  # tables die and new ones may take their ids: each reads its own values
        table = pd.DataFrame({"score": [round_, None, True], "status": ["judged", "failed", "judged"]})
        first = numeric_column(table, "score")
        assert numeric_column(table, "score") is first  # converted once
        assert np.array_equal(first, numeric(table["score"]), equal_nan=True) and first[0] == round_
        del table, first
        gc.collect()
    assert len(_CONVERTED) < 5  # forgotten with their tables
