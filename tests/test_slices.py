"""Aggregates per slice of the questions (kind, source): the same aggregates on each subset, in
results.json, MLflow and the console, and the objective per slice in the compare report."""
import json

import pytest

from conftest import HASH, mlflow_runs, run_app
from ragexp.metrics.scoring import Weights, aggregate, run_aggregates, slice_key
from ragexp.types import Judgement, Question, QuestionResult

WEIGHTS = Weights(context_relevance=0.3, answer_similarity=0.4, faithfulness=0.3, hallucination_penalty=True)


def result(qid, kind, source, scores, hallucination=False, failed=False):
    question = Question(qid, f"{qid}?", ("x",), kind=kind, source=source)
    if failed:
        return QuestionResult(question, failure="boom")
    cr, as_, f = scores
    judgement = Judgement("t", {"context_relevance": cr, "answer_similarity": as_, "faithfulness": f}, hallucination, "")
    return QuestionResult(question, judgement=judgement, generation={"token_f1": cr / 10})


RESULTS = [result("a", "factual", "golden", (8, 6, 10)), result("b", "factual", "synthetic", (6, 4, 8), True),
           result("c", "procedural", "synthetic", (9, 9, 9)), result("d", "procedural", "synthetic", (0, 0, 0), failed=True),
           result("e", "comparative", "", (5, 7, 2), True)]


def test_each_slice_has_the_aggregates_of_its_questions():
    spec, values = run_aggregates(RESULTS, WEIGHTS, {"llm_requests": 3}, ["kind", "source"])
    for column, value in (("kind", "factual"), ("kind", "procedural"), ("kind", "comparative"),
                          ("source", "golden"), ("source", "synthetic")):
        subset = [r for r in RESULTS if getattr(r.question, column) == value]
        for name, expected in aggregate(subset, WEIGHTS).items():
            if name != "retrieval_excluded_questions":
                assert values[slice_key(name, column, value)] == pytest.approx(expected), (column, value, name)
    assert values["total_questions/kind/procedural"] == 2 and values["failed_questions/kind/procedural"] == 1
    assert not any(k.endswith("/source/") for k in values)  # no slice for questions without a source
    assert not any(k.startswith("llm_requests/") for k in values)  # run totals are not per question
    entry = next(a.to_json() for a in spec if a.name == "overall_score/kind/factual")
    assert entry["where"] == ["kind", "factual"] and entry["kind"] == "overall"


def test_a_column_with_one_value_makes_no_slice():
    same = [r for r in RESULTS if r.question.kind == "factual"]
    _, values = run_aggregates(same, WEIGHTS, {}, ["kind"])
    assert not any("/" in k for k in values)


def test_slice_keys_are_valid_mlflow_names():
    assert slice_key("avg_faithfulness", "kind", "how-to: install?") == "avg_faithfulness/kind/how-to_ install_"


def test_a_run_reports_its_slices_everywhere_and_compare_ranks_them(tmp_path):
    data = tmp_path / "data"
    (data / "docs").mkdir(parents=True)
    (data / "docs" / "port.md").write_text("# Ports\n\nThe server listens on port 7400. The admin UI uses port 7401.\n")
    (data / "docs" / "dlq.txt").write_text("Failed jobs go to the dead-letter queue after five attempts.")
    rows = [{"id": "1", "question": "Which port does the server use?", "answer": "Port 7400.", "golden_docs": ["port"],
             "kind": "factual"},
            {"id": "2", "question": "Which port does the admin UI use?", "answer": "Port 7401.", "golden_docs": ["port"],
             "kind": "factual"},
            {"id": "3", "question": "How do failed jobs reach the dead-letter queue?", "answer": "After five attempts.",
             "golden_docs": ["dlq"], "kind": "procedural"}]
    (data / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cwd = tmp_path / "work"
    cwd.mkdir()
    proc = run_app("-m", "retriever=bm25,dense", f"dataset.path={data}", "retriever.top_k=2", *HASH, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    logged = "".join(log.read_text() for log in cwd.glob("multirun/*/*/*/ragexp.log"))  # a sweep's job summaries
    assert "per slice:" in logged and "kind=procedural" in logged
    [sweep_dir] = cwd.glob("multirun/*/*")
    merged = json.loads((sweep_dir / "results.json").read_text())
    for values in merged.values():
        assert values["total_questions/kind/factual"] == 2 and values["total_questions/kind/procedural"] == 1
    client, runs = mlflow_runs(cwd)
    child = next(r for r in runs if "mlflow.parentRunId" in r.data.tags)
    assert child.data.metrics["total_questions/kind/factual"] == 2
    assert "overall_score/kind/procedural" in child.data.metrics
    report = (sweep_dir / "report" / "report.md").read_text()
    assert "overall_score per slice of the questions" in report
    assert "kind/factual" in report and "kind/procedural" in report
    # a calibration of this judge (python -m ragexp.calibrate) is shown beside the leaderboard
    from ragexp.calibrate.__main__ import main as calibrate
    from ragexp.compare import make

    labels = tmp_path / "labels.csv"
    labels.write_text("question_id,faithfulness\n1,9\n2,8\n3,10\n")
    uri = f"sqlite:///{cwd / 'mlflow.db'}"
    assert calibrate([child.info.run_id, "--tracking-uri", uri, "--labels", str(labels), "--out", str(tmp_path / "cal"),
                      "--resamples", "20", "--no-log"]) == 0  # not logged: no calibration run
    _, files, _ = make([], uri, out_dir=tmp_path / "r1", plots=False, log=False)
    assert "Judge calibration" not in files["markdown"].read_text()
    assert calibrate([child.info.run_id, "--tracking-uri", uri, "--labels", str(labels), "--out", str(tmp_path / "cal"),
                      "--resamples", "20"]) == 0
    _, files, _ = make([], uri, out_dir=tmp_path / "r2", plots=False, log=False)
    report = files["markdown"].read_text()
    assert "## Judge calibration against human labels" in report
    assert f"| offline-hash | {child.info.run_id[:8]} | faithfulness | 3 |" in report
