"""python -m ragexp.calibrate with labels for part of a run: the human-corrected (PPI) mean of each
labelled metric beside the judge-only mean; hallucination labelled yes/no."""
import json

import numpy as np
import pytest

from ragexp.calibrate.__main__ import main

JUDGE = "ragexp.judges.offline.OfflineJudge"
FAITHFULNESS = [9.0, 8.0, 10.0, 7.0, 9.0, 6.0, 10.0, 8.0, 9.0, 7.0]  # a lenient judge (1-10)
FLAGGED = [False, False, False, True, False, False, False, False, True, False]


def write_run(folder):
    columns = ["question_id", "question", "kind", "expected_answer", "generated_answer", "retrieved_chunks",
               "judge", "faithfulness", "hallucination", "status"]
    data = [[f"q{i}", f"question {i}?", "factual", "yes", "yes", json.dumps([f"chunk {i}"]), "offline-hash", f, h, "judged"]
            for i, (f, h) in enumerate(zip(FAITHFULNESS, FLAGGED))]
    data.append(["q-failed", "?", "factual", "x", "", "[]", "offline-hash", None, None, "failed"])
    folder.mkdir(parents=True)
    (folder / "questions.json").write_text(json.dumps({"columns": columns, "data": data}))
    (folder / "config.yaml").write_text(f"judge:\n  _target_: {JUDGE}\n")
    return folder


def test_labels_for_part_of_the_run_give_a_corrected_mean_beside_the_judges(tmp_path):
    run = write_run(tmp_path / "run")
    people = {"q0": (6, "no"), "q1": (7, "no"), "q2": (8, "yes"), "q3": (5, "yes")}  # 4 of the 10 questions
    labels = tmp_path / "labels.csv"
    labels.write_text("question_id,faithfulness,hallucination\n" + "".join(f"{q},{f},{h}\n" for q, (f, h) in people.items()))
    out = tmp_path / "report"
    assert main([str(run), "--labels", str(labels), "--out", str(out), "--resamples", "50", "--no-log"]) == 0
    rows = {r["metric"]: r for r in json.loads((out / "calibration.json").read_text())["metrics"]}
    faith = rows["faithfulness"]
    assert faith["judge_mean"]["estimate"] == pytest.approx(np.mean(FAITHFULNESS)) and faith["judge_mean"]["questions"] == 10
    difference = np.mean([FAITHFULNESS[i] - people[f"q{i}"][0] for i in range(4)])
    assert faith["corrected_mean"]["estimate"] == pytest.approx(np.mean(FAITHFULNESS) - difference)
    assert faith["corrected_mean"]["labelled"] == 4
    low, high = faith["corrected_mean"]["ci"]
    assert low < faith["corrected_mean"]["estimate"] < high
    halluc = rows["hallucination"]  # yes/no labels against the judge's true/false
    assert halluc["judge_mean"]["estimate"] == pytest.approx(0.2)
    assert halluc["corrected_mean"]["estimate"] == pytest.approx(0.2 - np.mean([0 - 0, 0 - 0, 0 - 1, 1 - 1]))
    assert halluc["judge_mean"]["ci"][0] == 0.0 and halluc["corrected_mean"]["ci"][0] == 0.0  # cut to the 0-1 scale
    report = (out / "calibration.md").read_text()
    assert "## Human-corrected means (95% CI)" in report and "| faithfulness | 10 | 4 |" in report
