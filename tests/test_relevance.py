"""Relevance across chunking (the doc and span rules) and the retrieval aggregates, hand-checked."""
import math

import pytest

from ragexp.metrics import MetricSet
from ragexp.base.names import MetricName, metric_key
from ragexp.metrics.scoring import Weights, aggregate
from ragexp.types import Chunk, Hit, Question, QuestionResult
from ragexp.config.build import from_yaml

log2 = math.log2


def hits(*chunks: Chunk) -> list[Hit]:
    return [Hit(c, 1.0 / rank, rank) for rank, c in enumerate(chunks, 1)]


D1A, D1B, D2, D3 = (Chunk("d1#0", "d1", "x"), Chunk("d1#1", "d1", "x"), Chunk("d2#0", "d2", "x"), Chunk("d3#0", "d3", "x"))
# golden: d2 grade 2, d3 grade 1, d4 grade 1 (never retrieved), d5 judged non-relevant
GOLDEN = {"d2": 2, "d3": 1, "d4": 1, "d5": 0}
ALL = ["hit_rate@1", "hit_rate@2", "mrr", "recall@3", "precision@2", "map", "ndcg@3"]


def test_doc_rule_ranks_documents_by_their_best_chunk():
    judged = from_yaml("relevance/doc").grade(Question("q", "?", ("a",), GOLDEN), hits(D1A, D2, D1B, D3))
    # documents by first appearance: d1 (rank 1, unjudged), d2 (rank 2, grade 2), d3 (rank 3, grade 1)
    assert judged.ranking.ids == ("d1", "d2", "d3")
    assert judged.ranking.grades == (-1, 2, 1)
    scores = from_yaml("metrics/default", retrieval=ALL, embedder=None).retrieval_scores(judged.ranking, level=1)
    assert scores["hit_rate@1"] == 0 and scores["hit_rate@2"] == 1
    assert scores["mrr"] == pytest.approx(1 / 2)
    assert scores["recall@3"] == pytest.approx(2 / 3)  # d2, d3 of d2, d3, d4
    assert scores["precision@2"] == pytest.approx(1 / 2)
    assert scores["map"] == pytest.approx((1 / 2 + 2 / 3) / 3)
    # linear gain: DCG = 2/log2(3) + 1/log2(4); ideal d2, d3|d4, d4|d3 = 2/1 + 1/log2(3) + 1/log2(4)
    assert scores["ndcg@3"] == pytest.approx((2 / log2(3) + 1 / 2) / (2 + 1 / log2(3) + 1 / 2))
    exponential = from_yaml("metrics/default", retrieval=["ndcg@3"], ndcg_gain="exponential", embedder=None).retrieval_scores(judged.ranking, level=1)
    assert exponential["ndcg@3"] == pytest.approx((3 / log2(3) + 1 / 2) / (3 + 1 / log2(3) + 1 / 2))


def test_doc_rule_relevance_level_keeps_ndcg_graded():
    judged = from_yaml("relevance/doc", level=2).grade(Question("q", "?", ("a",), GOLDEN), hits(D1A, D3, D2))
    scores = from_yaml("metrics/default", retrieval=["mrr", "recall@2", "ndcg@3"], embedder=None).retrieval_scores(judged.ranking, level=2)
    assert scores["mrr"] == pytest.approx(1 / 3)  # only d2 (grade 2) is relevant at level 2, at rank 3
    assert scores["recall@2"] == 0
    # NDCG still gains from grade-1 documents (as trec_eval does): DCG = 1/log2(3) + 2/log2(4)
    assert scores["ndcg@3"] == pytest.approx((1 / log2(3) + 2 / 2) / (2 + 1 / log2(3) + 1 / 2))


def test_doc_rule_scores_questions_without_relevant_golden_documents_like_trec_eval():
    assert from_yaml("relevance/doc").grade(Question("q", "?", ("a",), {}), hits(D1A)).excluded == "no golden documents"
    only_zero = from_yaml("relevance/doc").grade(Question("q", "?", ("a",), {"d5": 0}), hits(D1A))
    assert only_zero.excluded == "" and from_yaml("metrics/default", retrieval=["mrr", "ndcg@3", "map"], embedder=None).retrieval_scores(only_zero.ranking, 1) == {
        "mrr": 0.0, "ndcg@3": 0.0, "map": 0.0}
    excluded = from_yaml("relevance/doc", without_relevant="exclude").grade(Question("q", "?", ("a",), {"d5": 0}), hits(D1A))
    assert excluded.ranking is None and "grade >= 1" in excluded.excluded
    from conftest import compose
    from ragexp.validation import problems

    assert problems(compose("relevance.level=0")) == ["relevance.level: must be >= 1, got 0"]


SPAN_CORPUS = [
    Chunk("a#0", "a", "The server listens on port 7400 by default."),
    Chunk("a#1", "a", "Port 74000 is reserved."),                  # not the answer: whole words only
    Chunk("b#0", "b", "Set PORT\n7400 in the config file."),      # case and whitespace differ: relevant
    Chunk("c#0", "c", "Bananas are yellow."),
]


def test_span_rule_marks_chunks_that_contain_an_expected_answer():
    rule = from_yaml("relevance/span")
    rule.prepare(SPAN_CORPUS)
    question = Question("q", "Which port?", ("port 7400",), {"a": 1})
    judged = rule.grade(question, hits(SPAN_CORPUS[3], SPAN_CORPUS[1], SPAN_CORPUS[2]))
    assert judged.ranking.ids == ("c#0", "a#1", "b#0")
    assert judged.ranking.grades == (0, 0, 1)
    assert judged.ranking.relevant_count(1) == 2  # a#0 and b#0 in the corpus
    scores = from_yaml("metrics/default", retrieval=["mrr", "hit_rate@2", "recall@3", "ndcg@3"], embedder=None).retrieval_scores(judged.ranking, level=1)
    assert scores["mrr"] == pytest.approx(1 / 3)
    assert scores["hit_rate@2"] == 0
    assert scores["recall@3"] == pytest.approx(1 / 2)
    assert scores["ndcg@3"] == pytest.approx((1 / log2(4)) / (1 + 1 / log2(3)))


def test_span_rule_leaves_out_what_has_no_answer_to_find():
    rule = from_yaml("relevance/span")
    rule.prepare(SPAN_CORPUS)
    unanswerable = Question("u", "?", (), {"a": 1}, kind="unanswerable", answerable=False)
    assert rule.grade(unanswerable, hits(SPAN_CORPUS[0])).excluded == "unanswerable question"
    nowhere = Question("n", "?", ("port 9999",), {"a": 1})
    assert rule.grade(nowhere, hits(SPAN_CORPUS[0])).excluded == "no chunk contains an expected answer"


def test_retrieval_means_leave_out_excluded_questions_and_count_them():
    q = Question("q", "?", ("a",), {"d": 1})
    results = [
        QuestionResult(q, retrieval={"mrr": 1.0, "ndcg@10": 0.5}),
        QuestionResult(q, retrieval={"mrr": 0.25, "ndcg@10": 0.0}),
        QuestionResult(q, retrieval_excluded="no golden documents"),
    ]
    aggregates = aggregate(results, Weights(context_relevance=1.0, hallucination_penalty=True))
    assert aggregates["mrr"] == pytest.approx((1.0 + 0.25) / 2)  # not / 3
    assert aggregates["ndcg_at_10"] == pytest.approx(0.25)
    assert aggregates["retrieval_excluded_questions"] == 1
    # no answer to judge is a retrieval-only question, not a failure; the means say over how many they are
    assert aggregates["failed_questions"] == 0 and aggregates["n_mrr"] == aggregates["n_ndcg_at_10"] == 2


@pytest.mark.parametrize("text,key,canonical", [
    ("ndcg@10", "ndcg_at_10", "ndcg@10"), ("ndcg_at_10", "ndcg_at_10", "ndcg@10"), ("mrr", "mrr", "mrr"),
    ("hit_rate@5", "hit_rate_at_5", "hit_rate@5"), ("avg_faithfulness", "avg_faithfulness", "avg_faithfulness"),
])
def test_metric_names_map_between_config_and_mlflow(text, key, canonical):
    assert metric_key(text) == key and str(MetricName.parse(text)) == canonical
    assert MetricName.parse(key) == MetricName.parse(canonical)


@pytest.mark.parametrize("bad", ["ndcg@0", "NDCG@10", "ndcg@ten", "bleu@4"])
def test_bad_metric_names_name_the_setting(bad):
    assert MetricSet.constraints([bad], answer=[])[0].startswith("retrieval: ")
