"""Answer metrics (SQuAD exact match and F1, correctness), the offline estimates and the scorecard."""
import numpy as np
import pytest

from ragexp.metrics.generation import (coherence_offline, conciseness_offline, exact_match, normalize_answer, scorecard,
                                       token_f1)
from ragexp.types import Answer, Chunk, Hit, Question
from ragexp.config.build import from_yaml


def test_squad_normalisation_exact_match_and_f1():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert exact_match("the Eiffel Tower.", ["Eiffel Tower", "Paris"]) == 1
    assert exact_match("Eiffel", ["Eiffel Tower"]) == 0
    # prediction "tower in paris" vs "the eiffel tower": common {tower}: P = 1/3, R = 1/2
    assert token_f1("tower in Paris", ["the Eiffel Tower"]) == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))
    assert token_f1("tower in Paris", ["the Eiffel Tower", "in Paris"]) == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
    assert token_f1("", ["x"]) == 0 and token_f1("I don't know.", ["I don't know"]) == 1


def test_offline_conciseness_and_coherence_estimates():
    assert conciseness_offline("port 7400") == 1.0
    # 8 words, distinct non-stopwords: port, 7400, default -> 3 / 8
    assert conciseness_offline("the port is 7400 the port is default") == pytest.approx(3 / 8)
    same = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert coherence_offline(same[:1]) == 1.0
    assert coherence_offline(same) == pytest.approx((1.0 + 0.0) / 2)


def test_scorecard_uses_the_specification_weights():
    assert scorecard({"faithfulness": 1.0, "correctness": 0.5, "conciseness": 0.0, "coherence": 1.0}) == \
        pytest.approx(0.5 + 0.3 * 0.5 + 0.1 * 1.0)
    assert scorecard({"faithfulness": 0.5, "conciseness": 1.0, "coherence": 0.0}) == pytest.approx(0.6 * 0.5 + 0.2)
    assert scorecard({"faithfulness": 1.0}) is None


def test_correctness_is_the_best_cosine_with_an_expected_answer(minilm):
    metrics = from_yaml("metrics/default", embedder=minilm)
    right = metrics.answer_scores("The server listens on port 7400.", ["Bananas are yellow.", "It listens on port 7400."])
    wrong = metrics.answer_scores("Bananas are yellow.", ["It listens on port 7400."])
    assert right["correctness"] > 0.7 > wrong["correctness"] >= 0
    assert right["exact_match"] == 0 and 0 < right["token_f1"] < 1
    assert set(from_yaml("metrics/default", embedder=None).answer_scores("x", ["x"])) == {"exact_match", "token_f1"}  # no embedder, no cosine


def test_offline_judge_declares_scales_and_gives_claim_level_hallucination(minilm):
    context = [Hit(Chunk("a#0", "a", "The Quarry server listens on port 7400 by default."), 0.9, 1)]
    question = Question("q", "Which port?", ("Port 7400.",), {"a": 1})
    judge = from_yaml("judge/offline", embedder=minilm)
    j = judge.judge(question, context, Answer("The Quarry server listens on port 7400 by default. "
                                              "Its mascot is a purple giraffe named Steve."))
    assert set(j.scores) == set(judge.metrics) == set(judge.scales)
    assert j.scores["claim_hallucination_rate"] == pytest.approx(1 / 2)
    # faithfulness weighs the claims by the share of their words found: the invented one holds a few ("is", "a")
    assert 1 + 9 * 0.5 <= j.scores["faithfulness"] < 1 + 9 * 0.75
    assert 0 <= j.scores["coherence_offline"] <= 1 and 0 < j.scores["conciseness_offline"] <= 1


def test_answer_measures_are_looked_up_by_name_like_retrieval_measures():
    from ragexp.errors import RagexpError
    from ragexp.metrics.answers import answer_measure

    assert answer_measure("token_f1").value("The Eiffel tower.", ["eiffel tower"]) == 1.0
    assert answer_measure("exact_match").value("Paris", ["paris", "Lyon"]) == 1.0
    assert not answer_measure("correctness").available()  # it embeds: none without the scoring embedder
    with pytest.raises(RagexpError) as err:
        answer_measure("bleu")
    assert str(err.value) == "metrics.answer: 'bleu' is not an answer metric; use correctness, exact_match, token_f1"


def test_answer_metrics_are_chosen_in_yaml_like_retrieval_ones(tmp_path):
    """`metrics.answer` chooses the answer metrics: only those are computed, logged and in the
    table; a name that is not one is refused before any work, naming the setting."""
    import json

    from conftest import HASH, run_app

    proc = run_app(*HASH, "retriever=bm25", "dataset.limit=3", "tracker=none", "metrics.answer=[token_f1]",
                   "hydra.run.dir=run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [aggregates] = json.loads((tmp_path / "run" / "results.json").read_text()).values()
    assert "avg_token_f1" in aggregates and "avg_exact_match" not in aggregates and "avg_correctness" not in aggregates
    proc = run_app(*HASH, "metrics.answer=[token_f1,bleu]", "tracker=none", cwd=tmp_path)
    assert proc.returncode == 2 and "metrics.answer: 'bleu' is not an answer metric" in proc.stderr
    chosen = from_yaml("metrics/default", answer=["exact_match"], embedder=None)
    assert chosen.answer_scores("Paris", ["paris"]) == {"exact_match": 1.0}
