"""Agreement statistics of python -m ragexp.calibrate against published worked examples, their
intervals, the level of measurement chosen per scale, yes/no kappa beside its prevalence, and the
judge's agreement with itself over its repeats (planted flips on the test server).

Worked examples (the values printed there, to 3 decimals):
- Krippendorff, K. (2011). Computing Krippendorff's Alpha-Reliability. Annenberg School for
  Communication, University of Pennsylvania, Departmental Papers 43 (also Content Analysis, 2nd ed.,
  2004, pp. 224-232): A. binary data, two observers, alpha = 0.095; C. nominal data, four observers,
  missing values, alpha = 0.743; the same data as interval data, alpha = 0.849.
- Cohen, J. (1960). A Coefficient of Agreement for Nominal Scales. Educational and Psychological
  Measurement 20(1), p. 45: 200 units, three categories, kappa = .492.
- Krippendorff (2004), Content Analysis, p. 246: two tables of the same observed agreement whose
  Cohen's kappa is .186 and .258."""
import hashlib
import json

import numpy as np
import pytest

from conftest import TEST_KEY_ENV, llm_args, run_app
from openai_server import judge_json, user_text
from ragexp.calibrate.__main__ import main
from ragexp.calibrate.agreement import Level, Reliability, between_people, level_of, unweighted_kappa

nan = np.nan
# Krippendorff (2011), C: four observers (rows), twelve units (columns), values 1-5, NaN: not coded
OBSERVERS = np.array([[1, 2, 3, 3, 2, 1, 4, 1, 2, nan, nan, nan],
                      [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, nan, 3],
                      [nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, nan],
                      [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, nan]])
# Krippendorff (2011), A: two observers, ten units, yes (1) / no (0)
BINARY = np.array([[0, 1, 0, 0, 0, 0, 0, 0, 1, 0],
                   [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]], dtype=float)
COHEN_1960 = [[88, 14, 18], [10, 40, 10], [2, 6, 12]]  # p. 45: rows observer 1, columns observer 2
KRIPPENDORFF_2004 = {0.186: [[12, 9, 9], [9, 14, 9], [9, 9, 20]], 0.258: [[12, 18, 18], [0, 14, 18], [0, 0, 20]]}


def coders(table):
    """The two observers' category indices of a contingency table, unit by unit."""
    a, b = [], []
    for i, row in enumerate(table):
        for j, count in enumerate(row):
            a += [i] * count
            b += [j] * count
    return np.array(a), np.array(b)


def test_alpha_equals_krippendorffs_worked_examples_and_its_interval_covers_them():
    nominal = Reliability(OBSERVERS, Level("nominal", np.arange(1.0, 6.0)))
    assert round(nominal.alpha(), 3) == 0.743
    interval = Reliability(OBSERVERS, Level("interval", None))
    assert round(interval.alpha(), 3) == 0.849
    binary = Reliability(BINARY, level_of((0.0, 1.0), BINARY))
    assert round(binary.alpha(), 3) == 0.095
    for reliability, printed in ((nominal, 0.743), (interval, 0.849), (binary, 0.095)):
        ci = reliability.interval(2000, 0, 0.95)
        assert ci.low < printed < ci.high and ci.low < ci.high
        assert reliability.interval(2000, 0, 0.95) == ci  # seeded: the same interval every time
    assert nominal.interval(2000, 1, 0.95) != nominal.interval(2000, 0, 0.95)


def test_kappa_equals_cohens_and_krippendorffs_worked_examples_and_its_interval_covers_them():
    a, b = coders(COHEN_1960)
    assert round(unweighted_kappa(a, b, 3), 3) == 0.492
    for printed, table in KRIPPENDORFF_2004.items():
        assert round(unweighted_kappa(*coders(table), 3), 3) == printed
    # the same units as two annotators' labels: the mean pairwise kappa and its bootstrap interval
    people = {name: {f"u{i}": float(v) for i, v in enumerate(values)} for name, values in (("one", a), ("two", b))}
    _, pairwise = between_people(people, np.arange(3.0), Level("nominal", np.arange(3.0)), 1000, 0, 0.95)
    assert round(pairwise.estimate, 3) == 0.492 and pairwise.low < 0.492 < pairwise.high


def test_alpha_level_follows_the_scale():
    assert level_of((0.0, 1.0), np.array([0, 1, 1, nan])).name == "nominal"  # yes/no
    assert level_of((0.0, 1.0), np.array([0, 0.25, 1])).name == "interval"  # a continuous 0-1 score
    assert level_of((1.0, 5.0), np.array([1, 2, 5])).name == "ordinal"
    assert level_of((1.0, 10.0), np.array([1, 10])).name == "ordinal"


RUN_TABLE = ["question_id", "question", "kind", "expected_answer", "generated_answer", "retrieved_chunks", "judge",
             "faithfulness", "clarity", "hallucination", "status"]


def write_run(folder, rows: int, faithfulness, clarity, hallucination):
    """A run folder of the RAG-triad judge (0-1 scores) with a rubric criterion on 1-5 and the
    hallucination verdict, as calibrate reads it."""
    data = [[f"u{i}", f"question {i}?", "factual", "x", "y", "[]", "triad", faithfulness[i], clarity[i],
             hallucination[i], "judged"] for i in range(rows)]
    folder.mkdir(parents=True)
    (folder / "questions.json").write_text(json.dumps({"columns": RUN_TABLE, "data": data}))
    (folder / "config.yaml").write_text("judge:\n  _target_: ragexp.judges.triad.TriadJudge\n"
                                        "rubric:\n  criteria:\n    clarity: {scale: 1-5}\n")
    return folder


def long_labels(path, metric_rows):
    """Labels one a line (question_id, metric, label, annotator); NaN: that annotator gave none."""
    lines = ["question_id,metric,label,annotator"]
    for metric, matrix in metric_rows.items():
        for who, row in enumerate(matrix):
            lines += [f"u{i},{metric},{v:g},ann{who}" for i, v in enumerate(row) if v == v]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_calibrate_reports_alpha_per_level_with_intervals_for_people_and_judge(tmp_path):
    """Through the command: people's alpha on a 0-1 score is interval (Krippendorff's C data
    rescaled: 0.849), on a yes/no verdict nominal (his A data: 0.095, also as judge vs one annotator),
    on a 1-5 criterion ordinal; each with an interval that covers it."""
    judge_yes = BINARY[0]
    run = write_run(tmp_path / "run", 12, faithfulness=[0.5] * 12, clarity=[3] * 12,
                    hallucination=[bool(v) for v in judge_yes] + [False, False])
    people_yes = np.full((2, 12), nan)
    people_yes[:, :10] = BINARY
    labels = long_labels(tmp_path / "labels.csv", {"faithfulness": (OBSERVERS - 1) / 4, "clarity": OBSERVERS,
                                                   "hallucination": people_yes})
    out = tmp_path / "report"
    assert main([str(run), "--labels", str(labels), "--out", str(out), "--resamples", "500", "--no-log"]) == 0
    rows = {r["metric"]: r for r in json.loads((out / "calibration.json").read_text())["metrics"]}
    assert [rows[m]["level"] for m in ("faithfulness", "clarity", "hallucination")] == ["interval", "ordinal", "nominal"]
    assert round(rows["faithfulness"]["krippendorff_alpha"], 3) == 0.849
    assert round(rows["hallucination"]["krippendorff_alpha"], 3) == 0.095
    assert rows["clarity"]["krippendorff_alpha"] == pytest.approx(Reliability(OBSERVERS, Level("ordinal", np.arange(1.0, 6.0))).alpha())
    for row in rows.values():
        low, high = row["krippendorff_alpha_ci"]
        assert low <= row["krippendorff_alpha"] <= high and low < high
        assert row["pairwise_kappa_ci"][0] <= row["pairwise_kappa"] <= row["pairwise_kappa_ci"][1]
    # judge vs people on the yes/no verdict: the judge is observer A, people's mean of A and B snapped (halves up)
    people = np.where(BINARY.mean(axis=0) >= 0.5, 1.0, 0.0)
    expected = Reliability(np.stack([judge_yes, people]), Level("nominal", np.array([0.0, 1.0]))).alpha()
    assert rows["hallucination"]["alpha"] == pytest.approx(expected)
    assert rows["hallucination"]["alpha_ci"][0] <= expected <= rows["hallucination"]["alpha_ci"][1]
    assert rows["hallucination"]["kappa_weights"] == "none" and rows["clarity"]["kappa_weights"] == "quadratic"
    report = (out / "calibration.md").read_text()
    assert "| hallucination | yes/no (nominal) | 10 | 2 |" in report and "| clarity | 1-5 (ordinal) | 12 | 4 |" in report


def two_by_two_kappa(judge, people):
    """Cohen's unweighted kappa of two yes/no columns, from its 2x2 table."""
    n = len(judge)
    observed = np.mean(judge == people)
    chance = np.mean(judge) * np.mean(people) + (1 - np.mean(judge)) * (1 - np.mean(people))
    return (observed - chance) / (1 - chance) if n else nan


def test_a_yes_no_verdict_gets_unweighted_kappa_beside_agreement_and_prevalence(tmp_path):
    """At a prevalence of 5% judge and people agree on 95% of the questions while kappa is low:
    the report gives both and says how to read them."""
    n = 40
    people = np.zeros(n)
    people[:2] = 1  # people say yes to 2 of 40
    judge = np.zeros(n)
    judge[1] = judge[5] = 1  # the judge to 2, one of them the same
    run = write_run(tmp_path / "run", n, faithfulness=[0.5] * n, clarity=[3] * n, hallucination=[bool(v) for v in judge])
    labels = long_labels(tmp_path / "labels.csv", {"hallucination": people[None, :]})
    out = tmp_path / "report"
    assert main([str(run), "--labels", str(labels), "--out", str(out), "--resamples", "300", "--no-log"]) == 0
    [row] = json.loads((out / "calibration.json").read_text())["metrics"]
    assert row["kappa"] == pytest.approx(two_by_two_kappa(judge, people))
    assert row["agreement"] == pytest.approx(38 / 40) and row["prevalence"] == pytest.approx(2 / 40)
    assert row["judge_prevalence"] == pytest.approx(2 / 40) and row["kappa"] < 0.5
    assert row["agreement_ci"][0] <= row["agreement"] <= row["agreement_ci"][1]
    report = (out / "calibration.md").read_text()
    assert "- hallucination (yes/no): kappa 0.474" in report and "at this prevalence kappa stays low" in report


def planted(text: str) -> bool:
    """The questions whose repeats the scripted judge makes disagree: a fixed half by their text."""
    return hashlib.md5(text.encode()).digest()[0] % 2 == 0


def test_the_judge_against_itself_finds_the_planted_flips(server, tmp_path):
    """judge=llm with 3 repeats at temperature 0.7 on the test server, which answers a fixed half of
    the questions differently on each repeat (faithfulness 6, 8, 10; yes on the first only): the
    report names exactly those questions, the flip rate is their share, and the other metrics
    never flip."""
    calls: dict[str, int] = {}
    flipped_texts = set()

    def chat(body):
        text = user_text(body)
        n = calls[text] = calls.get(text, 0) + 1
        if planted(text):
            flipped_texts.add(text)
            return judge_json(8, 7, 4 + 2 * n, hallucination=n == 1)
        return judge_json(8, 7, 9, hallucination=False)

    server.chat = chat
    done = run_app(*llm_args(server, judge="llm", generator=False), "judge.repeats=3", "judge.temperature=0.7",
                   "tracker=none", "dataset.limit=8", "llm.cache_dir=null", cwd=tmp_path, env={TEST_KEY_ENV: "k"})
    assert done.returncode == 0, done.stderr
    [table] = list(tmp_path.rglob("questions.json"))
    run = table.parent
    rows = json.loads(table.read_text())
    column = rows["columns"].index
    questions = {r[column("question_id")]: r[column("question")] for r in rows["data"]}
    flipping = [q for q, text in questions.items() if any(text in t for t in flipped_texts)]
    assert 0 < len(flipping) < len(questions)  # some planted, some not
    labels = tmp_path / "labels.csv"
    labels.write_text("question_id,metric,label\n" + "".join(f"{q},faithfulness,8\n" for q in questions))
    out = tmp_path / "report"
    assert main([str(run), "--labels", str(labels), "--out", str(out), "--resamples", "200", "--no-log"]) == 0
    found = json.loads((out / "calibration.json").read_text())["self_agreement"]
    assert found["temperature"] == 0.7
    by_metric = {m["metric"]: m for m in found["metrics"]}
    faithfulness = by_metric["faithfulness"]
    assert faithfulness["repeats"] == 3 and faithfulness["questions"] == len(questions)
    assert sorted(faithfulness["flipped"]) == sorted(flipping)
    assert faithfulness["flip_rate"] == pytest.approx(len(flipping) / len(questions))
    low, high = faithfulness["flip_rate_ci"]
    assert low < faithfulness["flip_rate"] < high
    assert sorted(by_metric["hallucination"]["flipped"]) == sorted(flipping) and by_metric["hallucination"]["level"] == "nominal"
    assert by_metric["context_relevance"]["flip_rate"] == 0 and by_metric["context_relevance"]["flipped"] == []
    report = (out / "calibration.md").read_text()
    assert "## The judge against itself (3 repeats at temperature 0.7)" in report
