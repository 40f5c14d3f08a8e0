"""People's labels through MLflow's review queues (ragexp.calibrate.review), on a real store (SQLite, and `mlflow server`):
`--export N --to mlflow` queues a run's sampled question traces with a label schema per judge metric;
reviewers' answers (human Feedback on those traces, as the Review tab writes them) come back through
`--labels-from mlflow`, the judge's own feedback left out."""
import json

import numpy as np
import pytest

from conftest import compose
from ragexp.calibrate.__main__ import main
from ragexp.config.build import from_yaml

JUDGE = "ragexp.judges.offline.OfflineJudge"


@pytest.fixture
def logged(mlflow_store, tmp_path, monkeypatch):
    """(store uri, run id, the run's judged results, the id of the same run logged again) of a small run
    logged with its question records."""
    monkeypatch.chdir(tmp_path)  # a sqlite store keeps its artifacts in ./mlruns
    from ragexp.run.pipeline import run as run_pipeline

    uri = mlflow_store
    cfg = compose("embedder=hash", "embedder@scoring_embedder=hash", "retriever=bm25", "dataset.limit=8",
                  f"cache.dir={tmp_path / 'cache'}")
    result = run_pipeline(cfg, "judged")
    run_id, other = (from_yaml("tracker/mlflow", experiment="review", tracking_uri=uri).log_run(result, {"judge": {"_target_": JUDGE}}) for _ in range(2))
    return uri, run_id, [r for r in result.questions if not r.failed], other


def queued(uri: str, run_id: str):
    """The run's experiment, its one review queue and the queue's items."""
    import mlflow
    from mlflow.genai import review_queues

    mlflow.set_tracking_uri(uri)
    experiment_id = mlflow.MlflowClient().get_run(run_id).info.experiment_id
    [queue] = review_queues.list_review_queues(experiment_id=experiment_id)
    return experiment_id, queue, review_queues.list_review_queue_items(queue.queue_id)


def answer(trace_id: str, name: str, value, reviewer: str = "alice"):
    """A reviewer's answer as the Review tab stores it: human feedback named after the label schema."""
    import mlflow
    from mlflow.entities import AssessmentSource

    mlflow.log_feedback(trace_id=trace_id, name=name, value=value,
                        source=AssessmentSource(source_type="HUMAN", source_id=reviewer))


def test_export_queues_the_sampled_questions_with_a_schema_per_metric(logged, capsys):
    from mlflow.genai import label_schemas
    from mlflow.genai.label_schemas import InputNumeric, InputPassFail

    from ragexp.store.reviews import question_traces

    uri, run_id, judged, _ = logged
    assert main([run_id, "--tracking-uri", uri, "--export", "5", "--to", "mlflow"]) == 0
    out = capsys.readouterr().out
    experiment_id, queue, items = queued(uri, run_id)
    assert f"#/experiments/{experiment_id}/review-queue" in out and queue.name in out
    assert "--labels-from mlflow" in out
    traces = question_traces(run_id, experiment_id)
    assert len(traces) == len(judged)
    by_trace = {info.trace_id: qid for qid, info in traces.items()}
    assert len(items) == 5 and all(item.item_id in by_trace for item in items)
    schemas = {s.schema_id: s for s in label_schemas.list_label_schemas(experiment_id=experiment_id)}
    named = {schemas[i].name: schemas[i].input for i in queue.schema_ids}
    assert {"faithfulness", "context_relevance", "hallucination"} <= set(named) and "Feedback" not in named
    assert named["faithfulness"] == InputNumeric(min_value=1.0, max_value=10.0)
    assert isinstance(named["hallucination"], InputPassFail)


def test_answers_come_back_as_labels_and_the_judges_feedback_does_not(logged, tmp_path):
    import mlflow

    from ragexp.store.reviews import question_traces

    uri, run_id, judged, _ = logged
    assert main([run_id, "--tracking-uri", uri, "--export", "4", "--to", "mlflow"]) == 0
    experiment_id, _, items = queued(uri, run_id)
    qid_of = {info.trace_id: qid for qid, info in question_traces(run_id, experiment_id).items()}
    people = {}
    for n, item in enumerate(sorted(items, key=lambda i: i.item_id)):
        people[qid_of[item.item_id]] = 2 + 2 * n
        answer(item.item_id, "faithfulness", 9)  # changed her mind: the later answer counts
        answer(item.item_id, "faithfulness", 2 + 2 * n)
    answer(items[0].item_id, "hallucination", True)
    # the judge's own feedback is on every trace too, under the same names; it must not count
    assert any(a.source.source_type == "LLM_JUDGE" and a.name == "faithfulness"
               for a in mlflow.get_trace(items[0].item_id).info.assessments)
    out = tmp_path / "report"
    assert main([run_id, "--tracking-uri", uri, "--labels-from", "mlflow", "--out", str(out), "--resamples", "50",
                 "--no-log"]) == 0
    rows = {r["metric"]: r for r in json.loads((out / "calibration.json").read_text())["metrics"]}
    assert rows["faithfulness"]["questions"] == 4 and rows["hallucination"]["questions"] == 1
    scores = {r.question.qid: r.judgement.scores["faithfulness"] for r in judged}
    mae = np.mean([abs(scores[q] - label) for q, label in people.items()])
    assert rows["faithfulness"]["mae"] == pytest.approx(mae)


def test_a_second_judges_scale_gets_its_own_schema(logged, capsys):
    import mlflow
    from mlflow.genai import label_schemas
    from mlflow.genai.label_schemas import InputNumeric

    uri, run_id, _, _ = logged
    mlflow.set_tracking_uri(uri)
    experiment_id = mlflow.MlflowClient().get_run(run_id).info.experiment_id
    label_schemas.create_label_schema("faithfulness", type="feedback", input=InputNumeric(min_value=0.0, max_value=1.0),
                                      experiment_id=experiment_id)
    assert main([run_id, "--tracking-uri", uri, "--export", "3", "--to", "mlflow"]) == 0
    _, queue, items = queued(uri, run_id)
    names = {s.schema_id: s.name for s in label_schemas.list_label_schemas(experiment_id=experiment_id)}
    assert "faithfulness (1-10)" in {names[i] for i in queue.schema_ids}
    answer(items[0].item_id, "faithfulness (1-10)", 7)
    answer(items[0].item_id, "faithfulness", 0.5)  # the other judge's schema: not this run's scale
    from ragexp.calibrate import review, source

    labels = review.read(source.load(run_id, uri))
    assert [(label.metric, label.value) for label in labels] == [("faithfulness", 7.0)]


@pytest.mark.parametrize("given, message", [
    (lambda run_id, uri, folder: [run_id, "--tracking-uri", uri, "--labels-from", "mlflow"],
     "no person has labelled its questions in MLflow yet"),
    (lambda run_id, uri, folder: [str(folder), "--export", "3", "--to", "mlflow"], "this run folder was never logged to MLflow"),
    (lambda run_id, uri, folder: [run_id, "--tracking-uri", uri, "--labels", "x.csv", "--to", "mlflow"],
     "--to goes with --export N"),
])
def test_what_cannot_be_done_gets_one_line(logged, tmp_path, capsys, given, message):
    from test_calibrate import write_run

    uri, run_id, _, _ = logged
    assert main(given(run_id, uri, write_run(tmp_path / "folder"))) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_answer_off_the_scale_names_the_trace_and_the_reviewer(logged, capsys):
    uri, run_id, _, _ = logged
    assert main([run_id, "--tracking-uri", uri, "--export", "2", "--to", "mlflow"]) == 0
    _, _, items = queued(uri, run_id)
    answer(items[0].item_id, "faithfulness", 42, reviewer="bob")
    assert main([run_id, "--tracking-uri", uri, "--labels-from", "mlflow"]) == 2
    err = capsys.readouterr().err
    assert f"trace {items[0].item_id}" in err and "bob's answer" in err and "off the judge's scale 1-10" in err


def test_compare_corrects_the_judges_means_with_the_same_answers(logged, tmp_path, capsys):
    from ragexp.calibrate import review, source
    from ragexp.compare.__main__ import main as compare
    from ragexp.stats.ppi import estimates

    uri, run_id, judged, other = logged
    assert main([run_id, "--tracking-uri", uri, "--export", "4", "--to", "mlflow"]) == 0
    _, _, items = queued(uri, run_id)
    for n, item in enumerate(items):
        answer(item.item_id, "faithfulness", 3 + n, reviewer="alice")
        answer(item.item_id, "faithfulness", 5 + n, reviewer="bob")  # two people: their mean is the label
    assert compare([run_id, other, "--tracking-uri", uri, "--labels-from", "mlflow", "--out", str(tmp_path / "c"),
                    "--no-plots", "--no-log", "--resamples", "100"]) == 0
    report = json.loads((tmp_path / "c" / "leaderboard.json").read_text())
    [row] = [c for c in report["corrected"] if c["metric"] == "faithfulness"]
    run = source.load(run_id, uri)
    people = {}
    for label in review.read(run):
        people.setdefault(label.question_id, []).append(label.value)
    scores = {r.question.qid: r.judgement.scores["faithfulness"] for r in judged}
    _, corrected = estimates(scores, {q: sum(v) / len(v) for q, v in people.items()}, 0.95, (1.0, 10.0))
    assert row["corrected"]["estimate"] == pytest.approx(corrected.estimate) and row["corrected"]["labelled"] == 4
    assert compare([run_id, "--tracking-uri", uri, "--labels-from", "mlflow", "--labels", "x.csv"]) == 2


def test_a_schema_says_which_end_of_its_scale_is_good():
    from ragexp.calibrate.review import scale_text

    assert scale_text("faithfulness", (1.0, 10.0)) == "faithfulness of the answer, from 1 (worst) to 10 (best)."
    assert scale_text("claim_hallucination_rate", (0.0, 1.0)).endswith("from 0 (best) to 1 (worst).")
