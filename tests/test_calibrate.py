"""python -m ragexp.calibrate: judge vs human labels, checked against statistics computed here by hand."""
import csv
import json
from itertools import combinations, permutations

import numpy as np
import pytest

from conftest import compose
from ragexp.calibrate.__main__ import main
from ragexp.calibrate.labels import stratified_sample
from ragexp.calibrate.source import from_folder
from ragexp.config.build import from_yaml

JUDGE = "ragexp.judges.offline.OfflineJudge"
SCORES = [9.0, 7.5, 3.0, 10.0, 5.2, 1.0, 6.0, 8.0]  # the judge's faithfulness (1-10)
PEOPLE = [8, 8, 2, 10, 4, 3, 6, 9]
KINDS = ["factual", "factual", "procedural", "procedural", "factual", "procedural", "factual", "procedural"]


def write_run(folder, scores=SCORES):
    """A run folder as calibrate reads it: the per-question table and the run's config."""
    columns = ["question_id", "question", "kind", "expected_answer", "generated_answer", "retrieved_chunks",
               "judge", "faithfulness", "context_relevance", "status"]
    data = [[f"q{i}", f"question {i}?", KINDS[i], "yes", "yes it is", json.dumps([f"chunk {i}"]), "offline-hash",
             s, s, "judged"] for i, s in enumerate(scores)]
    data.append(["q-failed", "?", "factual", "x", "", "[]", "offline-hash", None, None, "failed"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "questions.json").write_text(json.dumps({"columns": columns, "data": data}))
    (folder / "config.yaml").write_text(f"judge:\n  _target_: {JUDGE}\n")
    return folder


def ranks(x):
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(1, len(x) + 1)
    for value in set(x):  # ties get their mean rank
        tied = np.asarray(x) == value
        r[tied] = r[tied].mean()
    return r


def kendall_tau_b(x, y):
    concordant = discordant = ties_x = ties_y = 0
    for i, j in combinations(range(len(x)), 2):
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            ties_x += 1
        elif dy == 0:
            ties_y += 1
        elif dx == dy:
            concordant += 1
        else:
            discordant += 1
    return (concordant - discordant) / np.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))


def quadratic_kappa(a, b, k):
    observed = np.zeros((k, k))
    for i, j in zip(a, b):
        observed[i, j] += 1
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    weights = np.array([[(i - j) ** 2 for j in range(k)] for i in range(k)]) / (k - 1) ** 2
    return 1 - (weights * observed).sum() / (weights * expected).sum()


def ordinal_alpha(matrix):
    """Krippendorff's alpha at the ordinal level from its definition (coders x units, every unit
    coded by every coder): the coincidence matrix of values within units, and the ordinal distance
    (the values' frequencies from one to the other, less half of the two ends', squared)."""
    values = sorted(set(matrix.ravel()))
    index = {v: i for i, v in enumerate(values)}
    o = np.zeros((len(values), len(values)))
    for unit in matrix.T:
        for i, j in permutations(range(len(unit)), 2):
            o[index[unit[i]], index[unit[j]]] += 1 / (len(unit) - 1)
    n_c = o.sum(axis=1)
    n = n_c.sum()
    delta = np.array([[(n_c[min(c, k):max(c, k) + 1].sum() - (n_c[c] + n_c[k]) / 2) ** 2 for k in range(len(values))]
                      for c in range(len(values))])
    return 1 - (o * delta).sum() / n / ((np.outer(n_c, n_c) * delta).sum() / (n * (n - 1)))


def test_agreement_numbers_equal_the_formulas(tmp_path):
    run = write_run(tmp_path / "run")
    labels = tmp_path / "labels.csv"
    labels.write_text("question_id,metric,label\n" + "".join(f"q{i},faithfulness,{p}\n" for i, p in enumerate(PEOPLE)))
    out = tmp_path / "report"
    assert main([str(run), "--labels", str(labels), "--out", str(out), "--resamples", "200"]) == 0
    [row] = json.loads((out / "calibration.json").read_text())["metrics"]
    judge, people = np.array(SCORES), np.array(PEOPLE, dtype=float)
    assert row["questions"] == 8 and row["annotators"] == 1
    assert row["spearman"] == pytest.approx(np.corrcoef(ranks(judge), ranks(people))[0, 1])
    assert row["kendall"] == pytest.approx(kendall_tau_b(judge, people))
    points = np.arange(1, 11)
    assert row["kappa"] == pytest.approx(quadratic_kappa(np.array([int(s + 0.5) for s in SCORES]) - 1, people.astype(int) - 1, 10))
    assert row["mae"] == pytest.approx(np.mean(np.abs(judge - people)))
    assert row["bias"] == pytest.approx(np.mean(judge - people))
    low, high = row["spearman_ci"]
    assert low <= row["spearman"] <= high and low < high
    assert row["krippendorff_alpha"] is None  # one annotator: no ceiling
    assert len(points) == 10 and (out / "confusion.png").stat().st_size > 1000
    assert "| faithfulness | 1-10 (ordinal) | 8 | 1 |" in (out / "calibration.md").read_text()


def test_several_annotators_give_their_own_agreement(tmp_path):
    run = write_run(tmp_path / "run")
    other = [p if i % 2 else min(10, p + 1) for i, p in enumerate(PEOPLE)]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"question_id": f"q{i}", "metric": "faithfulness", "label": v, "annotator": who})
                              + "\n" for who, values in (("ann", PEOPLE), ("bob", other)) for i, v in enumerate(values)))
    out = tmp_path / "report"
    assert main([str(run), "--labels", str(labels), "--out", str(out), "--resamples", "100"]) == 0
    [row] = json.loads((out / "calibration.json").read_text())["metrics"]
    mean = (np.array(PEOPLE) + np.array(other)) / 2
    assert row["annotators"] == 2 and row["mae"] == pytest.approx(np.mean(np.abs(np.array(SCORES) - mean)))
    assert row["pairwise_kappa"] == pytest.approx(quadratic_kappa(np.array(PEOPLE) - 1, np.array(other) - 1, 10))
    # a 1-10 scale is ordinal: Krippendorff's ordinal alpha by its definition
    assert row["level"] == "ordinal"
    assert row["krippendorff_alpha"] == pytest.approx(ordinal_alpha(np.array([PEOPLE, other], dtype=float)))
    low, high = row["krippendorff_alpha_ci"]
    assert low <= row["krippendorff_alpha"] <= high and low < high


def test_export_samples_every_stratum_and_reads_back_filled_in(tmp_path):
    run = write_run(tmp_path / "run")
    sheet = tmp_path / "sheet.csv"
    assert main([str(run), "--export", "4", "--out", str(sheet)]) == 0
    rows = list(csv.DictReader(sheet.open()))
    assert len(rows) == 4 and len({r["question_id"] for r in rows}) == 4
    assert {r["kind"] for r in rows} == {"factual", "procedural"}
    assert all(r["faithfulness"] == "" and r["context"].startswith("[Doc 1]") for r in rows)
    assert "q-failed" not in {r["question_id"] for r in rows}
    # the people fill in the sheet; the same file is the labels
    by_id = {f"q{i}": p for i, p in enumerate(PEOPLE)}
    for r in rows:
        r["faithfulness"], r["annotator"] = by_id[r["question_id"]], "ann"
    with sheet.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out = tmp_path / "report"
    assert main([str(run), "--labels", str(sheet), "--out", str(out), "--resamples", "50"]) == 0
    [row] = json.loads((out / "calibration.json").read_text())["metrics"]
    assert row["questions"] == 4


def test_sample_is_stratified_and_seeded(tmp_path):
    run = from_folder(write_run(tmp_path / "run", scores=[1.0, 1.5, 2.0, 9.0, 9.5, 10.0, 5.0, 5.5]))
    first = stratified_sample(run, 6, seed=3)
    assert first == stratified_sample(run, 6, seed=3) and len(first) == 6
    table = run.judged().reset_index(drop=True)
    strata = {(table["kind"][i], "low" if table["faithfulness"][i] < 4 else "high" if table["faithfulness"][i] >= 7
               else "mid") for i in first}
    assert len(strata) >= 5  # 6 strata of 8 questions: a proportional sample leaves at most one out


@pytest.mark.parametrize("content,message", [
    ("question_id,metric,label\nq99,faithfulness,5\n", "labels.csv:2: question 'q99' is not in run"),
    ("question_id,metric,label\nq1,faithfulness,11\n", "labels.csv:2: faithfulness label 11 is off the judge's scale 1-10"),
    ("question_id,metric,label\nq1,faithfulness,good\n", "labels.csv:2: faithfulness label 'good' is not a number"),
    ("question_id,metric,label\nq1,fluency,3\n", "labels.csv:2: metric 'fluency' is not a metric of judge"),
    ("question_id,metric,label\nq1,faithfulness,3\nq2,faithfulness,12\nq77,faithfulness,1\n", "2 problems"),
])
def test_bad_labels_name_file_and_line(tmp_path, capsys, content, message):
    run = write_run(tmp_path / "run")
    labels = tmp_path / "labels.csv"
    labels.write_text(content)
    assert main([str(run), "--labels", str(labels), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_logged_run_gets_a_linked_calibration_run(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.chdir(tmp_path)  # a sqlite store keeps its artifacts in ./mlruns

    from ragexp.run.pipeline import run as run_pipeline

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose("embedder=hash", "embedder@scoring_embedder=hash", "retriever=bm25", "dataset.limit=6",
                  f"cache.dir={tmp_path / 'cache'}")
    result = run_pipeline(cfg, "judged")
    judged_id = from_yaml("tracker/mlflow", experiment="calib", tracking_uri=uri).log_run(result, {"judge": {"_target_": JUDGE}})
    ids = [r.question.qid for r in result.questions if not r.failed]
    labels = tmp_path / "labels.csv"
    labels.write_text("question_id,faithfulness,context_relevance\n" + "".join(f"{q},{1 + i % 10},5\n" for i, q in enumerate(ids)))
    assert main([judged_id, "--tracking-uri", uri, "--labels", str(labels), "--out", str(tmp_path / "r"),
                 "--resamples", "50"]) == 0
    client = mlflow.MlflowClient(uri)
    [calibration] = client.search_runs([client.get_experiment_by_name("calib").experiment_id],
                                       "tags.`ragexp.role` = 'calibration'")
    assert calibration.data.tags["ragexp.calibrates"] == judged_id
    assert calibration.data.metrics["questions_faithfulness"] == len(ids)
    judged = [r.judgement.scores["faithfulness"] for r in result.questions if not r.failed]
    expected_mae = np.mean([abs(score - (1 + i % 10)) for i, score in enumerate(judged)])
    assert calibration.data.metrics["mae_faithfulness"] == pytest.approx(expected_mae)
    assert {a.path for a in client.list_artifacts(calibration.info.run_id)} >= {"calibration.md", "calibration.json"}
