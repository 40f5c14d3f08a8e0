"""`python -m ragexp.compare --labels FILE`: human-corrected (PPI) means per configuration of a real
sweep, beside the judge-only means, from labels on part of each run's questions."""
import json

import numpy as np
import pytest

from conftest import call_in, logged_sweep


def compare_cli(*args, cwd):
    from ragexp.compare.__main__ import main

    return call_in(lambda: main(list(args)), ["python -m ragexp.compare", *args], cwd)


def judged_rows(small_sweep, name):
    """The per-question rows of the sweep's job named `name`, from its run folder."""
    for folder in small_sweep.sweep_dir.iterdir():
        results = folder / "results.json"
        if results.is_file() and name in json.loads(results.read_text()):
            table = json.loads((folder / "questions.json").read_text())
            return [dict(zip(table["columns"], row)) for row in table["data"] if row[table["columns"].index("status")] == "judged"]
    raise AssertionError(f"no job folder of {name}")


def test_labels_per_run_give_corrected_means_beside_the_judges(small_sweep, tmp_path):
    _, _, children = logged_sweep(small_sweep.uri)
    by_name = {run.info.run_name: run_id for run_id, run in children.items()}
    people = [3.0, 5.0, 4.0]  # people find the answers far less faithful than the judge does
    lines = ["run,question_id,faithfulness,hallucination"]
    expected = {}
    for name, run_id in by_name.items():
        rows = judged_rows(small_sweep, name)
        labelled = rows[:3]
        key = name if name.endswith("bm25") else run_id[:8]  # a run by its name or the start of its id
        lines += [f"{key},{r['question_id']},{p:g},yes" for r, p in zip(labelled, people)]
        judge = np.array([r["faithfulness"] for r in rows])
        expected[name] = (judge.mean(), judge.mean() - np.mean([r["faithfulness"] - p for r, p in zip(labelled, people)]))
    labels = tmp_path / "labels.csv"
    labels.write_text("\n".join(lines) + "\n")
    proc = compare_cli("--tracking-uri", small_sweep.uri, "--out", "out", "--no-log", "--no-plots", "--resamples", "200",
                       "--labels", str(labels), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "| configuration | metric | judged questions | labelled | judge only | human-corrected (PPI) |" in proc.stdout
    found = {(c["label"], c["metric"]): c for c in json.loads((tmp_path / "out" / "leaderboard.json").read_text())["corrected"]}
    for name, (judge_mean, corrected_mean) in expected.items():
        c = found[(name, "faithfulness")]
        assert c["judge_only"]["estimate"] == pytest.approx(judge_mean)
        assert c["corrected"]["estimate"] == pytest.approx(corrected_mean) and c["corrected"]["labelled"] == 3
        assert c["corrected"]["ci"][0] <= c["corrected"]["estimate"] <= c["corrected"]["ci"][1]
        assert found[(name, "hallucination")]["corrected"]["labelled"] == 3
    assert "## Human-corrected means (95% CI)" in (tmp_path / "out" / "report.md").read_text()


def test_a_label_for_a_run_not_compared_names_file_and_line(small_sweep, tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("run,question_id,faithfulness\nretriever=nope,q1,5\n")
    proc = compare_cli("--tracking-uri", small_sweep.uri, "--out", "out", "--no-log", "--no-plots",
                       "--labels", str(labels), cwd=tmp_path)
    assert proc.returncode == 2
    assert f"{labels}:2: run 'retriever=nope' is not one of the compared runs" in proc.stderr
