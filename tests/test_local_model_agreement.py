"""The judge against itself on a real model (real-model tier, marker `model`): SmolLM2-135M served by
ragexp judges each question three times at temperature 0.7, and `python -m ragexp.calibrate` reads
the repeats into the self-agreement table (flip rate with its interval, the questions that flip)
beside its agreement with people's labels. What the model says is not asserted (a model this
small may flip anywhere): that the repeats were read, and that the table accounts for every
question judged more than once. The figures are printed (`-s`) for the closing note."""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from conftest import HASH, cli_env, run_cli

# every test asks for the model (conftest `smollm2`): skipped without the runtime or the model, never at collection
pytestmark = [pytest.mark.process, pytest.mark.model, pytest.mark.usefixtures("smollm2")]


def test_repeats_at_temperature_07_give_a_flip_rate_for_every_metric_judged_more_than_once(tmp_path):
    done = run_cli("dataset.limit=3", *HASH, "retriever=bm25", "tracker=none", "judge=local",
                   "judge.endpoint.model_path=smollm2", "judge.max_tokens=200", "judge.temperature=0.7",
                   "judge.repeats=3", cwd=tmp_path)
    assert done.returncode in (0, 4), done.stderr[-2000:]  # 4: a model this small may fail every question
    [folder] = [p.parent for p in tmp_path.glob("outputs/*/*/results.json")]
    rows = [json.loads(line) for line in (folder / "questions.jsonl").read_text().splitlines() if line.strip()]
    judged = [r for r in rows if r.get("judge_scores")]
    assert judged, f"the model judged none of the 3 questions: {[r.get('failure_reason') for r in rows]}"
    labels = tmp_path / "labels.csv"
    metrics = sorted(judged[0]["judge_scores"])
    with labels.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["question_id", *metrics])
        for r in judged:  # people's labels: the judge's own mean scores (the table under test is the judge vs itself)
            writer.writerow([r["question_id"], *(round(r["judge_scores"][m]) for m in metrics)])
    report = subprocess.run([sys.executable, "-m", "ragexp.calibrate", str(folder), "--labels", str(labels), "--no-log",
                             "--out", str(tmp_path / "report")], cwd=tmp_path, env=cli_env(), capture_output=True,
                            text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    measured = json.loads((tmp_path / "report" / "calibration.json").read_text())["self_agreement"]
    assert measured["temperature"] == 0.7
    assert measured["metrics"], "three repeats of each judged question, and no self-agreement table"
    ids = {r["question_id"] for r in judged}
    for row in measured["metrics"]:
        assert 1 <= row["questions"] <= len(judged) and 0 <= row["flip_rate"] <= 1
        low, high = row["flip_rate_ci"]
        assert low <= row["flip_rate"] <= high
        assert set(row["flipped"]) <= ids
        assert len(row["flipped"]) == round(row["flip_rate"] * row["questions"])
    assert "flip rate" in report.stdout
    print("self-agreement at temperature 0.7:", json.dumps(measured["metrics"]))
