"""Retrieval and answer metrics through `pipeline.run`, in process (BM25, the hash embedder for the
generator and judge): per question, averaged into the aggregates, excluded questions counted."""
import json

import pytest

from conftest import HASH, compose
from ragexp.components.chunkers import RecursiveChunker
from ragexp.run.pipeline import run
from ragexp.run.report import summary
from ragexp.store.run_folder import question_table
from ragexp.config.build import from_yaml

DOCS = {
    "ports": "The Quarry server listens on port 7400 by default. Change it with the --port flag.",
    "logs": "Quarry writes its logs to stderr. Set QUARRY_LOG=debug for more detail.",
    "backup": "Backups run nightly at 02:00. A backup is a tar file of the data directory.",
    "tuning": "Raise worker_threads to use more cores. The default is four worker threads.",
}
QUESTIONS = [
    {"id": "q1", "question": "Which port does the Quarry server listen on?", "answer": "Port 7400.", "golden_docs": ["ports"]},
    {"id": "q2", "question": "Where does Quarry write logs?", "answer": "To stderr."},  # no golden documents
    {"id": "q3", "question": "When do backups run and how many worker threads?", "answer": "At 02:00; four.",
     "golden_docs": ["backup", "tuning"]},
]
METRICS = "metrics.retrieval=[hit_rate@1,mrr,ndcg@3,recall@2]"


@pytest.fixture()
def folder(tmp_path):
    (tmp_path / "docs").mkdir()
    for name, text in DOCS.items():
        (tmp_path / "docs" / f"{name}.txt").write_text(text)
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return tmp_path


def test_retrieval_metrics_per_question_and_their_means(folder, tmp_path):
    cfg = compose(f"dataset.path={folder}", "retriever=bm25", "retriever.top_k=1", METRICS, "metrics.depth=10", *HASH,
                  f"cache.dir={tmp_path / 'cache'}")
    result = run(cfg, "t")
    q1, q2, q3 = result.questions
    assert all(len(r.hits) == 1 for r in result.questions)  # the generator sees top_k ...
    # ... the metrics see `depth` chunks: the same as scoring a fresh BM25 ranking with the doc rule
    chunks = RecursiveChunker(512, 64).chunk(from_yaml("dataset/sample", path=str(folder)).load().documents)
    bm25 = from_yaml("retriever/bm25", top_k=1)
    bm25.index(chunks)
    metrics = from_yaml("metrics/default", retrieval=["hit_rate@1", "mrr", "ndcg@3", "recall@2"], embedder=None)
    for r in (q1, q3):
        [ranked] = bm25.search([r.question.text], depth=10)
        graded = from_yaml("relevance/doc").grade(r.question, ranked)
        expected = metrics.retrieval_scores(graded.ranking, 1)
        context = graded.context_scores([ranked[0].chunk.doc_id], 1)  # what the generator saw: its top_k
        assert r.retrieval == pytest.approx({**expected, **context})
    assert q2.retrieval == {} and q2.retrieval_excluded == "no golden documents"
    aggregates = result.aggregates
    for name, key in (("mrr", "mrr"), ("ndcg@3", "ndcg_at_3"), ("recall@2", "recall_at_2")):
        assert aggregates[key] == pytest.approx((q1.retrieval[name] + q3.retrieval[name]) / 2, abs=1e-4)
    assert aggregates["retrieval_excluded_questions"] == 1
    assert "1 questions excluded from retrieval metrics (relevance=doc: no golden documents): q2" in result.notes
    # answer metrics for every answered question, averaged; statuses where the specification has targets
    assert all({"correctness", "exact_match", "token_f1", "generation_score"} <= set(r.generation) for r in result.questions)
    assert aggregates["avg_token_f1"] == pytest.approx(sum(r.generation["token_f1"] for r in result.questions) / 3, abs=1e-4)
    assert result.statuses["mrr"] in ("good", "warning") and result.scales["avg_faithfulness"] == (1.0, 10.0)
    table = question_table(result)
    assert table["mrr"][1] is None and table["retrieval_excluded"][1] == "no golden documents"
    assert table["ndcg_at_3"][0] == q1.retrieval["ndcg@3"] and table["token_f1"][2] == q3.generation["token_f1"]
    shown = summary(result)  # no gate set: no gate's verdict, and a line saying what decides what
    assert "  mrr " in shown and "gate '" not in shown and shown.splitlines()[-1].startswith("no gate set: ")


def test_a_beir_set_without_answers_is_judged_reference_free_and_nothing_fails(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in DOCS.items()))
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "Which port does Quarry listen on?"}) + "\n")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tports\t2\nq1\ttuning\t1\n")
    result = run(compose("dataset=beir", f"dataset.path={tmp_path}", "retriever=bm25", "tracker=none", *HASH,
                         f"cache.dir={tmp_path / 'cache'}"), "beir")
    [q1] = result.questions
    # no reference: judged on what needs none (faithfulness, context relevance), never failed
    assert q1.status == "judged" and not q1.failure
    assert "answer_similarity" not in q1.judgement.scores and "faithfulness" in q1.judgement.scores
    assert "correctness" not in q1.generation
    assert result.aggregates["failed_questions"] == 0 and "avg_faithfulness" in result.aggregates
    assert "avg_answer_similarity" not in result.aggregates and "overall_score" not in result.aggregates
    assert result.aggregates["hit_rate_at_5"] == q1.retrieval["hit_rate@5"] and "ndcg_at_10" in result.aggregates
