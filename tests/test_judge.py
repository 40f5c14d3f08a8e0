"""The offline judge, generator and the weighting of scores, on hand-made cases."""
import pytest

from ragexp.errors import RagexpError
from ragexp.judges import OfflineJudge
from ragexp.metrics.scoring import Weights, aggregate
from ragexp.types import Answer, Chunk, Hit, Judgement, Question, QuestionResult
from ragexp.config.build import from_yaml

CONTEXT = [
    Hit(Chunk("a#0", "a", "The Quarry server listens on port 7400 by default. It was written in Go."), 0.9, 1),
    Hit(Chunk("b#0", "b", "Bananas are rich in potassium. The Eiffel Tower is in Paris."), 0.5, 2),
]
QUESTION = Question("q1", "Which port does the Quarry server listen on?", ("Quarry listens on port 7400 by default.",), {"a": 1})


def test_answer_copied_from_the_context_is_faithful(minilm):
    judge = from_yaml("judge/offline", embedder=minilm)
    j = judge.judge(QUESTION, CONTEXT, Answer("The Quarry server listens on port 7400 by default."))
    assert j.judge == "offline-minilm"
    assert j.scores["faithfulness"] == 10 and not j.hallucination
    assert j.scores["answer_similarity"] > 8
    # 2 of the 4 retrieved sentences are about the Quarry server: the Go sentence may count too
    assert 1 + 9 * 1 / 4 <= j.scores["context_relevance"] <= 1 + 9 * 2 / 4 + 1e-9
    assert "of 4 retrieved sentences" in j.reasoning


def test_invented_sentence_is_a_hallucination(minilm):
    j = from_yaml("judge/offline", embedder=minilm).judge(QUESTION, CONTEXT, Answer(
        "The Quarry server listens on port 7400 by default. Its mascot is a purple giraffe named Steve."))
    assert j.hallucination
    assert 1 + 9 * 0.5 <= j.scores["faithfulness"] < 1 + 9 * 0.75  # half the claims, and a few words of the other
    assert "1 unsupported" in j.reasoning


def test_wrong_answer_scores_low_similarity(minilm):
    j = from_yaml("judge/offline", embedder=minilm).judge(QUESTION, CONTEXT, Answer("Bananas are rich in potassium."))
    assert j.scores["answer_similarity"] < 4


def test_extractive_generator_answers_with_the_best_sentence(minilm):
    answer = from_yaml("generator/extractive", embedder=minilm, max_sentences=1).generate(QUESTION.text, CONTEXT)
    assert answer.text == "The Quarry server listens on port 7400 by default."
    assert from_yaml("generator/extractive", embedder=minilm).generate(QUESTION.text, []).text == ""


def judged(cr, as_, f, hallucination):
    scores = {"context_relevance": cr, "answer_similarity": as_, "faithfulness": f}
    return QuestionResult(QUESTION, judgement=Judgement("t", scores, hallucination, ""))


def test_aggregates_follow_the_specification():
    results = [judged(8, 6, 10, False), judged(6, 4, 8, True), QuestionResult(QUESTION, failure="boom")]
    agg = aggregate(results, Weights(context_relevance=0.3, answer_similarity=0.4, faithfulness=0.3, hallucination_penalty=True))
    assert agg["avg_context_relevance"] == 7 and agg["avg_answer_similarity"] == 5 and agg["avg_faithfulness"] == 9
    assert agg["hallucination_rate"] == 0.5
    assert agg["total_questions"] == 3 and agg["failed_questions"] == 1
    assert agg["overall_score"] == pytest.approx((7 * 0.3 + 5 * 0.4 + 9 * 0.3) * 0.5)
    no_penalty = aggregate(results, Weights(False, context_relevance=0.2, answer_similarity=0.5, faithfulness=0.3))
    assert no_penalty["overall_score"] == pytest.approx(7 * 0.2 + 5 * 0.5 + 9 * 0.3)


def test_all_failed_gives_counts_and_no_averages():
    agg = aggregate([QuestionResult(QUESTION, failure="x")], Weights(context_relevance=0.3, answer_similarity=0.4, faithfulness=0.3, hallucination_penalty=True))
    assert agg == {"total_questions": 1, "failed_questions": 1, "retrieval_excluded_questions": 1}  # no retrieval scores


def test_weights_must_sum_to_one_and_match_the_judge():
    [problem] = Weights.constraints(context_relevance=0.3, answer_similarity=0.5, faithfulness=0.3)
    assert problem.endswith("= 1.1; the weights must sum to 1 (set weights.<metric>=...)")
    with pytest.raises(RagexpError, match=r"weights: answer_relevance not produced by judge 'offline-minilm'"):
        Weights(answer_relevance=1.0, hallucination_penalty=True).check("offline-minilm", OfflineJudge.metrics)
