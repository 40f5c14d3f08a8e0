"""judge=cascade with people's labels as the expensive judge (judge@judge.expensive=people): a first
run lists the drawn questions to label (labels_wanted.csv in its folder); filled in, the sheet is
the labels a rerun corrects the cheap means with, on the same drawn questions; labels come from a
file or from MLflow's Review tab (the reader calibrate and compare use)."""
import csv
import json

import numpy as np
import pytest

from ragexp import evaluate
from ragexp.errors import RagexpError

ROWS = [{"id": f"q{i}", "question": f"Which port does service {i} listen on?",
         "contexts": [f"Service {i} listens on port {7000 + i}."],
         "answer": f"Service {i} listens on port {7000 + i}." if i % 3 else "Bananas are yellow and grow in bunches.",
         "reference": f"Port {7000 + i}."} for i in range(20)]


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    """A run without cache.dir keeps its cache in the working folder: here, tmp_path."""
    monkeypatch.chdir(tmp_path)


def people_args(labels, *more: str) -> list[str]:
    return ["judge=cascade", "judge@judge.expensive=people", f"judge.expensive.labels={labels}",
            "embedder@scoring_embedder=hash", "judge.sample=0.4", "judge.tune=false", *more]


def wanted(folder) -> list[dict]:
    with (folder / "labels_wanted.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def person(row: dict) -> tuple[int, str]:
    """A person's faithfulness and hallucination label of a sheet row: the banana answers are unfaithful."""
    return (1, "yes") if "Bananas" in row["generated_answer"] else (9, "no")


def test_a_first_run_lists_the_drawn_questions_and_their_labels_correct_the_rerun(tmp_path):
    labels = tmp_path / "labels.csv"
    first = evaluate(ROWS, overrides=people_args(labels, f"cache.dir={tmp_path / 'cache'}"), output_dir=tmp_path / "first")
    sheet = wanted(first.folder)
    drawn = {r.question.qid for r in first.result.questions if r.judgement.details["judged_by"] != "cheap"}
    assert {row["question_id"] for row in sheet} == drawn and 2 <= len(drawn) < 20
    assert {"faithfulness", "hallucination", "question", "generated_answer"} <= set(sheet[0])
    assert first.aggregates["avg_faithfulness"] == first.aggregates["avg_faithfulness_cheap"]  # nothing to correct with
    assert any("no label yet" in n and "labels_wanted.csv" in n for n in first.result.notes)

    with labels.open("w", newline="") as handle:  # the sheet, filled in
        writer = csv.writer(handle)
        writer.writerow(["question_id", "faithfulness", "hallucination"])
        writer.writerows([row["question_id"], *person(row)] for row in sheet)
    again = evaluate(ROWS, overrides=people_args(labels, f"cache.dir={tmp_path / 'cache'}"), output_dir=tmp_path / "again")
    assert not (again.folder / "labels_wanted.csv").exists()
    table = again.table.set_index("question_id")
    assert set(table.index[table["judged_by"] == "cheap+expensive"]) == drawn  # the same questions drawn
    cheap = table["faithfulness_cheap"].to_numpy(dtype=float)
    people = {row["question_id"]: person(row)[0] for row in sheet}
    weights = {q: 1 / table.at[q, "inclusion_probability"] for q in drawn}
    correction = sum(w * (people[q] - table.at[q, "faithfulness_cheap"]) for q, w in weights.items())
    assert again.aggregates["avg_faithfulness"] == pytest.approx(cheap.mean() + correction / sum(weights.values()), abs=1e-3)
    assert again.aggregates["avg_context_relevance"] == pytest.approx(again.aggregates["avg_context_relevance_cheap"])
    assert any("context_relevance" in n and "uncorrected" in n for n in again.result.notes)  # people left it out

    from ragexp.calibrate.__main__ import main as calibrate  # how far the cheap judge agrees with the same people

    out = tmp_path / "agreement"
    assert calibrate([str(again.folder), "--labels", str(labels), "--out", str(out), "--resamples", "20", "--no-log"]) == 0
    rows = {r["metric"]: r for r in json.loads((out / "calibration.json").read_text())["metrics"]}
    errors = [abs(table.at[q, "faithfulness_cheap"] - v) for q, v in people.items()]
    assert rows["faithfulness"]["mae"] == pytest.approx(np.mean(errors)) and rows["faithfulness"]["questions"] == len(drawn)


def test_labels_of_questions_not_in_the_run_or_off_the_scale_are_one_message(tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("question_id,faithfulness\nq1,11\nq99,5\n")
    with pytest.raises(RagexpError) as caught:
        evaluate(ROWS, overrides=people_args(labels), output_dir=tmp_path / "run")
    assert f"{labels}:2: faithfulness label 11 is off the judge's scale 1-10" in str(caught.value)
    assert f"{labels}:3: question 'q99' is not in run" in str(caught.value)


def test_peoples_labels_alone_are_no_judge(tmp_path):
    with pytest.raises(RagexpError, match="judge=people: people's labels judge the sample of a cascade"):
        evaluate(ROWS, overrides=["judge=people", "judge.labels=x.csv", "embedder@scoring_embedder=hash"],
                 output_dir=tmp_path / "run")
    with pytest.raises(RagexpError, match="judge.expensive.run"):
        evaluate(ROWS, overrides=people_args("mlflow"), output_dir=tmp_path / "run2")


def test_reviewers_answers_in_mlflow_are_the_labels(tmp_path, monkeypatch):
    """The first run logged (its question records in MLflow); `calibrate RUN --export drawn --to mlflow`
    queues its drawn questions for review; reviewers answer there (human feedback, as the Review tab
    writes it); the rerun reads the answers with labels=mlflow."""
    import mlflow
    from mlflow.entities import AssessmentSource
    from mlflow.genai import review_queues

    from ragexp.calibrate.__main__ import main as calibrate
    from ragexp.store.reviews import question_traces

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cache = f"cache.dir={tmp_path / 'cache'}"
    first = evaluate(ROWS, overrides=people_args(tmp_path / "none.csv", cache, f"tracker.tracking_uri={uri}"),
                     output_dir=tmp_path / "first", track=True)
    sheet = {row["question_id"]: row for row in wanted(first.folder)}
    assert calibrate([first.run_id, "--tracking-uri", uri, "--export", "drawn", "--to", "mlflow"]) == 0
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.MlflowClient().get_run(first.run_id).info.experiment_id
    [queue] = review_queues.list_review_queues(experiment_id=experiment)
    queued = {item.item_id for item in review_queues.list_review_queue_items(queue.queue_id)}
    traces = question_traces(first.run_id, experiment)
    assert queued == {traces[q].trace_id for q in sheet}  # the drawn questions, and only they
    for qid, row in sheet.items():
        faithfulness, hallucinated = person(row)
        for name, value in (("faithfulness", faithfulness), ("hallucination", hallucinated == "yes")):
            mlflow.log_feedback(trace_id=traces[qid].trace_id, name=name, value=value,
                                source=AssessmentSource(source_type="HUMAN", source_id="alice"))
    again = evaluate(ROWS, overrides=people_args("mlflow", f"judge.expensive.run={first.run_id}",
                                                 f"judge.expensive.tracking_uri={uri}", cache),
                     output_dir=tmp_path / "again")
    table = again.table.set_index("question_id")
    labelled = table[table["judged_by"] == "cheap+expensive"]
    assert set(labelled.index) == set(sheet)
    assert all(labelled.at[qid, "faithfulness_expensive"] == person(row)[0] for qid, row in sheet.items())
    assert any("people's labels (MLflow run" in n and f"{len(sheet)} of the {len(sheet)} drawn" in n
               for n in again.result.notes)


def test_a_dry_run_says_how_many_labels_people_would_be_asked_for(tmp_path):
    from conftest import HASH, run_app

    proc = run_app("judge=cascade", "judge@judge.expensive=people", "judge.expensive.labels=labels.csv",
                   "judge.sample=0.25", "dry_run=true", *HASH, "retriever=bm25", "dataset.limit=20", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "total           0 requests" in proc.stdout  # people are no endpoint
    assert "people's labels: about 5 of the 20 questions" in proc.stdout
    assert not (tmp_path / "labels.csv").exists() and not list(tmp_path.glob("outputs/*/*/labels_wanted.csv"))
