"""python -m ragexp.calibrate --outputs FILE: a labelled recorded-outputs file judged by the
configured judge, its agreement with people, and for a yes/no label the threshold that maximises
balanced accuracy on a tuning part, printed as a ready override of the judge's own setting."""
import csv
import inspect
import json

import numpy as np
import pytest

from conftest import call_in
from ragexp.calibrate.outputs import compose, labelled_rows
from ragexp.calibrate.thresholds import balanced_accuracy, best_cut, roc_auc, split
from ragexp.judges.offline import OfflineJudge

HASH = ("embedder@scoring_embedder=hash",)
CONTEXT = ["The {name} server listens on port {port} by default.", "The {name} server was written in Go.",
           "Its configuration lives in one file named {name}.toml.", "The {name} project was started in 2019."]
INVENTED = ["Penguins migrate across Antarctic shelves every winter.", "Bananas ripen faster beside apples in paper.",
            "Volcanic glass forms when lava cools quickly.", "Owls rotate their heads nearly all the way round."]


def labelled_outputs(path, rows=20):
    """Answers of four sentences, `invented` of them not in the context (0-4, four rows each);
    people call an answer a hallucination from two invented sentences on (one slip is tolerated)."""
    with path.open("w") as out:
        for i in range(rows):
            name, invented = f"Quarry{i}", i % 5
            context = [s.format(name=name, port=7000 + i) for s in CONTEXT]
            answer = context[: 4 - invented] + INVENTED[:invented]
            out.write(json.dumps({"id": f"q{i}", "question": f"What port does {name} listen on?", "contexts": [" ".join(context)],
                                  "answer": " ".join(answer), "reference": f"port {7000 + i}",
                                  "hallucination": "yes" if invented >= 2 else "no", "faithfulness": 10 - 2 * invented,
                                  "kind": "factual", "comment": f"free text {i}"}) + "\n")
    return path


def calibrate(*args, cwd):
    from ragexp.calibrate.__main__ import main

    return call_in(lambda: main(list(args)), ["python -m ragexp.calibrate", *args], cwd)


def test_the_offline_judges_share_setting_is_fitted_and_printed_as_an_override(tmp_path):
    path = labelled_outputs(tmp_path / "labelled.jsonl")
    proc = calibrate("--outputs", str(path), *HASH, "judge.hallucination_share=0", "--out", "report", "--resamples", "50",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # the share of invented sentences people tolerate (1 in 4) and the first they do not (2 in 4): 0.375 between
    assert proc.stdout.rstrip().splitlines()[-1] == "judge.hallucination_share=0.375"
    score, setting = OfflineJudge.verdict_settings["hallucination"]  # the offline judge's verdict: score > setting
    assert score in OfflineJudge.metrics and setting in inspect.signature(OfflineJudge.__init__).parameters
    report = json.loads((tmp_path / "report" / "calibration.json").read_text())
    [verdict] = report["yes_no"]
    assert verdict["label"] == "hallucination" and verdict["rows"] == 20 and verdict["positives"] == 12
    assert verdict["tuning"] + verdict["held_out"] == 20 and verdict["held_out"] == 6
    assert verdict["held_out_balanced_accuracy"] == 1.0  # the fitted share separates the held-out part too
    assert verdict["current"] == 0.0 and verdict["current_held_out_balanced_accuracy"] < 1.0  # share 0 flags one slip
    assert verdict["verdict"]["false_alarms"] > 0  # the judge as configured flags tolerated answers
    assert verdict["roc_auc"]["claim_hallucination_rate"] == 1.0 and verdict["roc_auc"]["faithfulness"] == 0.0
    rows = {r["metric"]: r for r in report["metrics"]}  # the agreement table: faithfulness (1-10), hallucination (1/0)
    assert rows["faithfulness"]["questions"] == 20 and rows["faithfulness"]["spearman"] > 0.9
    assert rows["hallucination"]["bias"] == pytest.approx(4 / 20)  # share 0 flags the 4 answers with one slip
    # more flags than people give is strict, not lenient: higher is worse for hallucination
    assert "- hallucination: the judge is stricter than people (bias +0.200" in proc.stdout
    assert any("'comment'" in note and "left aside" in note for note in report["notes"])
    # the judged rows are a run folder: calibrating it with its labels again judges nothing
    from ragexp.calibrate.source import from_folder

    judged = from_folder(tmp_path / "report")
    assert judged.judge == "offline-hash" and len(judged.judged()) == 20 and "claim_hallucination_rate" in judged.metrics


class JudgeWithoutASetting(OfflineJudge):
    """A judge whose hallucination verdict is not a threshold on one of its scores (as an LLM judge's)."""

    verdict_settings: dict = {}


def test_a_judge_without_a_setting_gets_the_best_rule_on_its_scores(tmp_path):
    path = labelled_outputs(tmp_path / "labelled.jsonl")
    proc = calibrate("--outputs", str(path), *HASH, f"judge._target_={__name__}.JudgeWithoutASetting", "--out", "report",
                     "--resamples", "20", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "has no setting for this verdict; the best rule on its scores is `" in proc.stdout
    [verdict] = json.loads((tmp_path / "report" / "calibration.json").read_text())["yes_no"]
    assert verdict["override"] is None and verdict["held_out_balanced_accuracy"] == 1.0


def test_ragas_columns_in_csv_and_bad_rows_named_by_line(tmp_path):
    path = tmp_path / "ragas.csv"
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["user_input", "retrieved_contexts", "response", "reference", "supported"])
        writer.writerow(["Which port?", json.dumps(["Quarry listens on 7400."]), "7400.", "7400", "yes"])
        writer.writerow(["Which language?", json.dumps(["Quarry is written in Go."]), "Rust.", "Go", "no"])
    (first, second), skipped = labelled_rows(path, compose([]))  # read as dataset=outputs reads it
    assert skipped == [] and first.where == f"{path.resolve()}:2" and second.where == f"{path.resolve()}:3"
    assert first.question.text == "Which port?" and first.hits[0].chunk.text == "Quarry listens on 7400."
    assert first.answer.text == "7400." and first.question.answers == ("7400",) and second.extra == {"supported": "no"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "contexts": [], "answer": "a"}) + "\n" + json.dumps({"answer": "a"}) + "\n")
    proc = calibrate("--outputs", str(bad), *HASH, cwd=tmp_path)
    assert proc.returncode == 2 and f"{bad.resolve()}:2: no question (column question or user_input;" in proc.stderr
    assert "Traceback" not in proc.stderr
    # the loader's settings are overrides: on_error=skip leaves the bad row out, and the report says so
    labelled = labelled_outputs(tmp_path / "with_a_bad_row.jsonl", rows=10)
    with labelled.open("a") as out:
        out.write(json.dumps({"answer": "a", "hallucination": "no"}) + "\n")
    proc = calibrate("--outputs", str(labelled), *HASH, "dataset.on_error=skip", "--out", "skipped", "--resamples", "10",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "skipped" / "calibration.json").read_text())
    assert report["rows"] == 10
    assert f"1 malformed rows skipped (first: {labelled.resolve()}:11: no question" in " ".join(report["notes"])


def test_the_threshold_statistics_are_their_definitions():
    truth = [True, True, False, False, False]
    assert balanced_accuracy([True, False, False, False, True], truth) == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert roc_auc([0.9, 0.4, 0.4, 0.1, 0.2], truth) == pytest.approx((3 + 2.5) / 6)  # a tie counts half
    cut = best_cut("s", [0.9, 0.6, 0.5, 0.1, 0.2], truth)
    assert (cut.threshold, cut.higher, cut.tuning_balanced_accuracy) == (0.55, True, 1.0)
    assert best_cut("s", [0.1, 0.2, 0.9, 0.8, 0.7], truth).higher is False
    tuning, held = split([True] * 10 + [False] * 10, 0.3, seed=1)
    assert len(held) == 6 and not set(tuning) & set(held) and len(tuning) + len(held) == 20


def test_an_override_is_printed_only_when_it_beats_the_current_setting_held_out(tmp_path):
    path = labelled_outputs(tmp_path / "labelled.jsonl")
    # the current share already separates the labels: the fitted one cannot beat it
    proc = calibrate("--outputs", str(path), *HASH, "judge.hallucination_share=0.375", "--out", "kept", "--resamples", "20",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "keep the current setting" in proc.stdout and "does not beat it on the held-out part" in proc.stdout
    assert not proc.stdout.rstrip().splitlines()[-1].startswith("judge.")
    [kept] = json.loads((tmp_path / "kept" / "calibration.json").read_text())["yes_no"]
    assert kept["override"] and kept["recommended"] is None
    assert kept["current_errors"] == {"false_alarms": 0.0, "misses": 0.0} and set(kept["fitted_errors"]) == {"false_alarms", "misses"}
    # nothing held out: the figures are said to be in-sample and nothing is recommended
    proc = calibrate("--outputs", str(path), *HASH, "judge.hallucination_share=0", "--holdout", "0", "--out", "all",
                     "--resamples", "20", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "in-sample (--holdout 0: nothing held out)" in proc.stdout and "not recommended" in proc.stdout
    assert not proc.stdout.rstrip().splitlines()[-1].startswith("judge.")
    [fitted] = json.loads((tmp_path / "all" / "calibration.json").read_text())["yes_no"]
    assert fitted["held_out"] == 0 and fitted["recommended"] is None and fitted["figures_on"].startswith("in-sample")


def test_group_holds_out_whole_groups_and_a_missing_group_is_one_line(tmp_path):
    truth = np.array([i % 2 == 0 for i in range(30)])
    groups = [f"doc{i // 3}" for i in range(30)]  # 10 documents of 3 rows each
    tuning, held = split(truth, 0.3, seed=1, groups=groups)
    assert sorted([*tuning, *held]) == list(range(30)) and len(held) >= 9
    assert not {groups[i] for i in tuning} & {groups[i] for i in held}  # no document on both sides
    assert split(truth, 0.3, seed=1, groups=groups)[1].tolist() == held.tolist()  # seeded
    path = labelled_outputs(tmp_path / "labelled.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for i, row in enumerate(rows):
        row["article"] = f"a{i // 4}"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = calibrate("--outputs", str(path), *HASH, "--group", "article", "--out", "grouped", "--resamples", "20",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "split by article (5 groups)" in proc.stdout and "'article'" not in proc.stdout.split("split by")[0]
    [grouped] = json.loads((tmp_path / "grouped" / "calibration.json").read_text())["yes_no"]
    assert grouped["held_out"] % 4 == 0 and grouped["held_out"] > 0  # whole articles of 4 rows
    proc = calibrate("--outputs", str(path), *HASH, "--group", "source", "--resamples", "20", cwd=tmp_path)
    assert proc.returncode == 2 and "--group source: 20 of 20 rows have no 'source'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_yes_no_label_is_drawn_as_its_two_by_two_table():
    from ragexp.calibrate.__main__ import confusion
    from ragexp.calibrate.agreement import MetricAgreement, leniency

    judge, people = np.array([1, 1, 0, 0, 1.0]), np.array([1, 0, 0, 0, 0.0])
    names, counts = confusion(MetricAgreement("hallucination", (0.0, 1.0), 5, 1, pairs=(judge, people)))
    assert names == ["no", "yes"] and counts == [[2, 2], [0, 1]]  # counts[people][judge]
    names, _ = confusion(MetricAgreement("faithfulness", (0.0, 1.0), 5, 1, pairs=(judge * 0.5, people)))
    assert len(names) == 5  # a 0-1 score: its points 0, 0.25, ..., 1
    assert leniency("faithfulness", 0.1) == "more lenient than people" and leniency("hallucination", 0.1) == "stricter than people"
