"""A run folder is its own audit trail: trec_eval on its run.trec and qrels.trec gives exactly the
logged retrieval means; questions.jsonl holds the full ranking; grade-0 queries are scored as
trec_eval scores them; context metrics say what the generator saw."""
import json

import pytest

from conftest import HASH, SHARED_DATA, mlflow_runs, needs_shared, run_app
from ragexp.trec_eval import check, evaluate, parse_measures, read_qrels, read_run

HOTPOT = SHARED_DATA / "hotpotqa_ircot_dev500"


def run_folder(tmp_path, *args):
    proc = run_app(*args, *HASH, "tracker=none", "hydra.run.dir=run", f"cache.dir={tmp_path / 'cache'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "run"
    [values] = json.loads((folder / "results.json").read_text()).values()
    return folder, values


@needs_shared("hotpotqa_ircot_dev500")
def test_trec_eval_on_the_run_folder_gives_the_logged_means(tmp_path):
    folder, values = run_folder(tmp_path, "dataset=hotpotqa", f"dataset.path={HOTPOT}", "dataset.limit=25",
                                "retriever=bm25", "metrics.retrieval=[hit_rate@1,hit_rate@5,mrr,ndcg@10,recall@10,precision@5,map]")
    lines, equal = check(folder)
    assert equal, "\n".join(lines)
    spec = json.loads((folder / "retrieval.json").read_text())
    assert spec["questions_scored"] == 25 and spec["level"] == 1 and spec["gain"] == "linear"
    measures = parse_measures(["success.1,5", "recip_rank", "ndcg_cut.10", "recall.10", "P.5", "map"], 1, "linear")
    means = evaluate(read_qrels(folder / "qrels.trec"), read_run(folder / "run.trec"), measures)["all"]
    for key, label in (("hit_rate_at_1", "success_1"), ("hit_rate_at_5", "success_5"), ("mrr", "recip_rank"),
                       ("ndcg_at_10", "ndcg_cut_10"), ("recall_at_10", "recall_10"), ("precision_at_5", "P_5"),
                       ("map", "map")):
        assert round(means[label], 4) == values[key], key
    records = [json.loads(line) for line in (folder / "questions.jsonl").read_text().splitlines()]
    assert len(records) == 25
    first = records[0]
    assert len(first["ranking"]) == 50 and [h["rank"] for h in first["ranking"]] == list(range(1, 51))
    assert len(first["context"]) == 5 and first["context"][0]["chunk_id"] == first["ranking"][0]["chunk_id"]
    assert first["scored_items"][0] == first["ranking"][0]["doc_id"]  # the doc rule ranks documents
    assert set(first["judge_scores"]) >= {"faithfulness", "context_relevance"} and first["reasoning"]


def tiny_dataset(tmp_path, golden_of_third):
    data = tmp_path / "data"
    data.mkdir()
    docs = {"port": "The server listens on port 7400.", "admin": "The admin UI uses port 7401 and a port of its own.",
            "dlq": "Failed jobs go to the dead-letter queue after five attempts."}
    (data / "corpus.jsonl").write_text("".join(json.dumps({"doc_id": d, "text": t}) + "\n" for d, t in docs.items()))
    rows = [{"id": "1", "question": "Which port does the server listen on?", "answer": "7400", "golden_docs": ["port"]},
            {"id": "2", "question": "Where do failed jobs go?", "answer": "The dead-letter queue.", "golden_docs": ["dlq"]},
            {"id": "3", "question": "Which port does the admin UI use?", "answer": "7401", "golden_docs": golden_of_third}]
    (data / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def test_a_query_judged_only_non_relevant_scores_zero_like_trec_eval(tmp_path):
    data = tiny_dataset(tmp_path, {"port": 0, "dlq": 0})
    folder, values = run_folder(tmp_path, "dataset=jsonl", f"dataset.path={data}", "retriever=bm25")
    assert values["retrieval_excluded_questions"] == 0
    assert check(folder)[1]
    records = {r["question_id"]: r for r in map(json.loads, (folder / "questions.jsonl").read_text().splitlines())}
    assert records["3"]["retrieval_metrics"]["mrr"] == 0.0
    assert values["mrr"] == pytest.approx(round((records["1"]["retrieval_metrics"]["mrr"]
                                                 + records["2"]["retrieval_metrics"]["mrr"]) / 3, 4))


def test_excluding_such_queries_is_an_option_and_is_counted(tmp_path):
    data = tiny_dataset(tmp_path, {"port": 0, "dlq": 0})
    folder, values = run_folder(tmp_path, "dataset=jsonl", f"dataset.path={data}", "retriever=bm25", "relevance.without_relevant=exclude")
    assert values["retrieval_excluded_questions"] == 1
    assert "3 0 " not in (folder / "qrels.trec").read_text()  # not in the qrels: trec_eval skips it too
    assert check(folder)[1]


def test_context_metrics_count_only_what_the_generator_saw(tmp_path):
    data = tiny_dataset(tmp_path, ["admin"])
    folder, values = run_folder(tmp_path, "dataset=jsonl", f"dataset.path={data}", "retriever=bm25", "retriever.top_k=1")
    records = {r["question_id"]: r for r in map(json.loads, (folder / "questions.jsonl").read_text().splitlines())}
    for record in records.values():
        seen = {c["doc_id"] for c in record["context"]}
        relevant = {d for d, g in record["golden"].items() if g >= 1}
        assert record["retrieval_metrics"]["context_hit"] == float(bool(seen & relevant))
        assert record["retrieval_metrics"]["context_recall"] == len(seen & relevant) / len(relevant)
        assert len(record["context"]) == 1 and len(record["ranking"]) > 1
    assert values["context_hit"] == pytest.approx(
        round(sum(r["retrieval_metrics"]["context_hit"] for r in records.values()) / 3, 4))
    assert values["context_hit"] <= values["hit_rate_at_5"]


def test_the_audit_files_are_mlflow_artifacts(tmp_path):
    data = tiny_dataset(tmp_path, ["admin"])
    proc = run_app("dataset=jsonl", f"dataset.path={data}", "retriever=bm25", *HASH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    client, [run] = mlflow_runs(tmp_path)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"questions.jsonl", "run.trec", "qrels.trec", "retrieval.json", "questions.json"} <= artifacts
