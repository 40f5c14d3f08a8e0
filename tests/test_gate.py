"""Targets (good / ok / warning) and the quality gate: thresholds, scales, and the exit status of
the real CLI both ways."""
import json
import re

import numpy as np

import pytest

from conftest import HASH, mlflow_runs, run_app
from ragexp.errors import RagexpError
from ragexp.metrics.gate import Gate
from ragexp.metrics.targets import assess
from ragexp.config.build import from_yaml

ONE_TEN, UNIT = (1.0, 10.0), (0.0, 1.0)
CI = r"\[95% CI [\d.]+, [\d.]+\]"  # a threshold's line shows the estimate's interval


@pytest.mark.parametrize("key,scale,value,status", [
    ("avg_faithfulness", ONE_TEN, 9.0, "good"), ("avg_faithfulness", ONE_TEN, 7.0, "ok"),
    ("avg_faithfulness", ONE_TEN, 6.99, "warning"), ("avg_context_relevance", ONE_TEN, 8.0, "good"),
    ("avg_answer_similarity", ONE_TEN, 5.9, "warning"), ("hallucination_rate", UNIT, 0.1, "good"),
    ("hallucination_rate", UNIT, 0.2, "ok"), ("hallucination_rate", UNIT, 0.21, "warning"),
    ("avg_faithfulness", UNIT, 0.9, "good"), ("avg_faithfulness", UNIT, 0.8, "ok"),  # the triad's 0-1 table
    ("avg_faithfulness", UNIT, 0.69, "warning"), ("hit_rate_at_5", UNIT, 0.6, "good"),
    ("hit_rate_at_1", UNIT, 0.59, "warning"), ("mrr", UNIT, 0.49, "warning"), ("ndcg_at_10", UNIT, 0.6, "ok"),
    ("avg_claim_hallucination_rate", UNIT, 0.07, "ok"),
])
def test_targets_follow_the_specification_tables(key, scale, value, status):
    assert assess({key: value}, {key: scale}) == {key: status}


def test_no_target_without_a_known_matching_scale():
    assert assess({"avg_faithfulness": 9.5}, {}) == {}
    assert assess({"avg_faithfulness": 9.5}, {"avg_faithfulness": (0.0, 100.0)}) == {}
    assert assess({"map": 0.9, "total_questions": 3}, {"map": UNIT}) == {}


PRODUCTION = {"hit_rate_at_5": {"min": 0.7}, "mrr": {"min": 0.8}, "faithfulness": {"min": 0.9, "scale": [0, 1]}}


def test_gate_maps_a_unit_threshold_onto_the_judges_scale():
    gate = from_yaml("gate/none", name="production", thresholds=PRODUCTION)
    scales = {"hit_rate_at_5": UNIT, "mrr": UNIT, "avg_faithfulness": ONE_TEN}
    passed = gate.evaluate({"hit_rate_at_5": 0.7, "mrr": 0.9, "avg_faithfulness": 9.1}, scales)
    assert passed.passed and len(passed.checks) == 3
    failed = gate.evaluate({"hit_rate_at_5": 0.9, "mrr": 0.9, "avg_faithfulness": 9.0}, scales)  # 9.0 < 1 + 9 * 0.9
    assert not failed.passed
    assert "avg_faithfulness = 9.0000 >= 9.1 (0.9 on the 0-1 scale): FAILED" in failed.checks
    same_scale = gate.evaluate({"hit_rate_at_5": 0.9, "mrr": 0.9, "avg_faithfulness": 0.91}, {**scales, "avg_faithfulness": UNIT})
    assert same_scale.passed


def test_gate_with_max_bounds_and_missing_metrics():
    gate = from_yaml("gate/none", name="custom", thresholds={"hallucination_rate": {"max": 0.1}, "ndcg@10": {"min": 0.5}})
    verdict = gate.evaluate({"hallucination_rate": 0.15, "ndcg_at_10": 0.6}, {})
    assert not verdict.passed and verdict.checks == ("hallucination_rate = 0.1500 <= 0.1: FAILED", "ndcg_at_10 = 0.6000 >= 0.5: ok")
    assert gate.retrieval_metrics() == ["ndcg@10"]
    assert not gate.evaluate({"hallucination_rate": 0.0}, {}).passed  # ndcg@10 not computed: fails, as in the spec


def test_gate_settings_are_checked_before_any_work():
    from conftest import compose
    from ragexp.validation import problems

    assert Gate.constraints({"mrr": {"at_least": 0.5}}) == [
        "thresholds.mrr: write {min: X}, {max: X} or both, optionally with scale: [lo, hi] and required: true; "
        "at_least is not one of them"]
    assert problems(compose("gate=production", "gate.thresholds.mrr.min=high")) == [
        "gate.thresholds.mrr.min: 'high' is not a number"]
    gate = from_yaml("gate/none", name="g", thresholds={"answer_relevance": {"min": 0.8, "scale": [0, 1]}})
    with pytest.raises(RagexpError, match="gate.thresholds.answer_relevance: this run does not produce answer_relevance"):
        gate.check(["avg_faithfulness", "mrr"], {})
    with pytest.raises(RagexpError, match="cannot be mapped"):
        gate.check(["avg_answer_relevance"], {})
    gate.check(["avg_answer_relevance"], {"avg_answer_relevance": UNIT})
    assert not from_yaml("gate/none").active


def test_a_threshold_the_data_cannot_give_is_left_out_unless_required():
    """Retrieval metrics need golden documents: a run without them (recorded outputs) gets the
    threshold as not applicable, with why; `required: true` fails it; a metric the run could have
    computed but did not still fails."""
    scales = {"avg_faithfulness": ONE_TEN}
    missing = {"hit_rate_at_5": "no question to score it on: no golden documents", "mrr": "no question to score it on: no golden documents"}
    verdict = from_yaml("gate/none", name="production", thresholds=PRODUCTION).evaluate({"avg_faithfulness": 9.5}, scales, not_given=missing)
    assert verdict.passed and verdict.thresholds_passed
    assert verdict.checks[0] == ("hit_rate@5: not applicable (no question to score it on: no golden documents; "
                                 "required: true makes it fail): left out")
    required = from_yaml("gate/none", name="production", thresholds={**PRODUCTION, "mrr": {"min": 0.8, "required": True}})
    verdict = required.evaluate({"avg_faithfulness": 9.5}, scales, not_given=missing)
    assert not verdict.passed and ("mrr: not computed in this run (no question to score it on: no golden documents), "
                                   "and the gate requires it: FAILED") in verdict.checks
    assert not from_yaml("gate/none", name="production", thresholds=PRODUCTION).evaluate({"avg_faithfulness": 9.5}, scales).passed  # not said why: fails


def test_production_gate_on_recorded_outputs_without_golden_documents(tmp_path):
    import ragexp

    rows = [{"id": f"q{n}", "question": f"Which port does service {n} use?", "contexts": [f"Service {n} uses port {7000 + n}."],
             "answer": f"Service {n} uses port {7000 + n}."} for n in range(4)]
    overrides = ["embedder@scoring_embedder=hash", "cache.enabled=false", "gate=production", "~gate.thresholds.answer_relevance"]
    evaluation = ragexp.evaluate(rows, overrides=overrides, output_dir=tmp_path / "a")
    assert evaluation.passed, evaluation.result.gate.checks
    assert [c for c in evaluation.result.gate.checks if "not applicable" in c] == [
        "hit_rate@5: not applicable (no question to score it on: no golden documents; required: true makes it fail): left out",
        "mrr: not applicable (no question to score it on: no golden documents; required: true makes it fail): left out"]
    required = ragexp.evaluate(rows, overrides=[*overrides, "+gate.thresholds.mrr.required=true"], output_dir=tmp_path / "b")
    assert not required.passed


GATE_ARGS = ["dataset.limit=2", "retriever=bm25", *HASH, "gate=production", "~gate.thresholds.answer_relevance"]


def test_without_a_gate_the_console_says_what_the_targets_say_and_that_the_exit_ignores_it(tmp_path):
    proc = run_app("dataset.limit=2", "retriever=bm25", *HASH, "tracker=none", "hydra.run.dir=run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [results] = json.loads((tmp_path / "run" / "results.json").read_text()).values()
    statuses = json.loads((tmp_path / "run" / "run.json").read_text())["statuses"]
    warned = [k for k, v in statuses.items() if v == "warning"]
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("no gate set: ")]
    assert line.startswith(f"no gate set: {len(warned)} rated warning against their targets ({', '.join(warned)}): "
                           "ragexp.evaluate's `passed` is False" if warned else "no gate set: no metric rated warning")
    assert "the exit status does not depend on the targets" in line and "gate_passed" not in results


def test_passing_gate_exits_zero(tmp_path):
    proc = run_app(*GATE_ARGS, "gate.thresholds.mrr.min=0", "gate.thresholds.hit_rate_at_5.min=0", "tracker=none",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [results] = json.loads(next(tmp_path.glob("outputs/*/*/results.json")).read_text()).values()
    assert results["gate_passed"] == 1
    assert "gate 'production': passed" in proc.stdout
    assert re.search(rf"mrr = {results['mrr']:.4f} {CI} >= 0: ok", proc.stdout)  # the interval beside the estimate
    assert re.search(rf"avg_faithfulness = {results['avg_faithfulness']:.4f} {CI} >= 9.1 \(0.9 on the 0-1 scale\)",
                     proc.stdout)


def test_failing_gate_exits_non_zero_and_logs_gate_passed(tmp_path):
    proc = run_app(*GATE_ARGS, "gate.thresholds.mrr.min=1.01", "run_name=gated", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    [results] = json.loads(next(tmp_path.glob("outputs/*/*/results.json")).read_text()).values()
    assert re.search(rf"mrr = {results['mrr']:.4f} {CI} >= 1.01: FAILED", proc.stdout)
    # the metric's row says both: its target's mark, and that the gate failed it
    [row] = [line for line in proc.stdout.splitlines() if line.split()[:1] == ["mrr"] and line.split()[1] != "="]
    assert row.split()[2] in ("good", "ok", "warning") and row.endswith("gate >= 1.01 FAILED")
    assert "gate 'production': FAILED (it decides the exit status)" in proc.stdout
    assert re.search(rf"ragexp: error: quality gate 'production' failed \(1 of 3 thresholds missed\): "
                     rf"mrr = {results['mrr']:.4f} {CI} >= 1.01", proc.stderr)
    _, [run] = mlflow_runs(tmp_path)
    assert run.data.metrics["gate_passed"] == 0 and run.data.tags["gate"] == "production"
    assert run.data.metrics["mrr"] == pytest.approx(results["mrr"])
    assert run.data.tags["target.avg_context_relevance"] in ("good", "ok", "warning")
    # the extractive generator copies context sentences: its faithfulness is no measure of quality
    assert run.data.tags["target.avg_faithfulness"] == "by construction"
    assert run.data.tags["target.hallucination_rate"] == "by construction"
    assert "(0.9 on the 0-1 scale) (holds by construction): ok" in proc.stdout


def test_a_sweep_runs_every_job_then_exits_non_zero_when_one_missed_the_gate(tmp_path):
    proc = run_app("-m", *GATE_ARGS, "gate.thresholds.mrr.min=0,1.01", "tracker=none", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    [sweep] = tmp_path.glob("multirun/*/*")
    merged = json.loads((sweep / "results.json").read_text())
    assert {name: r["gate_passed"] for name, r in merged.items()} == {
        "min=0": 1, "min=1.01": 0}  # a number is named with its key's last part (a job's run name)
    assert "quality gate failed in 1 of 2 jobs: min=1.01" in proc.stderr


def test_a_threshold_tests_the_point_estimate_and_shows_its_interval_beside_it():
    from ragexp.metrics.gate import threshold_intervals
    from ragexp.metrics.scoring import Aggregate
    from ragexp.stats.inference import bootstrap_ci

    gate = from_yaml("gate/none", name="mine", thresholds={"mrr": {"min": 0.5}, "overall_score": {"min": 1}})
    rows = [{"status": "judged", "mrr": v} for v in (1.0, 0.5, 0.0, 1.0, 0.25, 1.0)] + [{"status": "failed"}]
    spec = (Aggregate("mrr", ("mrr",), "mean", "valued"), Aggregate("overall_score", ("a", "b"), "overall"))
    intervals = threshold_intervals(gate, spec, rows)
    assert set(intervals) == {"mrr"}  # a weighted overall score is not one column's mean
    expected = bootstrap_ci(np.array([1.0, 0.5, 0.0, 1.0, 0.25, 1.0]), resamples=2000)
    assert intervals["mrr"] == (expected.low, expected.high) and expected.low < 0.5 < expected.high
    verdict = gate.evaluate({"mrr": 0.625, "overall_score": 2.0}, {"mrr": UNIT}, intervals=intervals)
    line = next(c for c in verdict.checks if c.startswith("mrr"))
    assert line == f"mrr = 0.6250 [95% CI {expected.low:.4f}, {expected.high:.4f}] >= 0.5: ok"  # the estimate decides
    assert verdict.passed


@pytest.mark.parametrize("margin, message", [
    (9, "gate.margin: 9 is as wide as faithfulness's whole scale (1-10): a margin is on the metric's own scale, e.g. 0.45"),
    ({"hallucination": 1}, "gate.margin.hallucination: 1 is as wide as hallucination's whole scale (0-1)"),
])
def test_a_margin_as_wide_as_its_metrics_scale_is_refused(tmp_path, margin, message):
    import pandas as pd

    folder = tmp_path / "base"
    folder.mkdir()
    pd.DataFrame({"question_id": ["a", "b"], "faithfulness": [8, 9], "hallucination": [0, 1],
                  "status": ["judged", "judged"]}).to_json(folder / "questions.json", orient="split", index=False)
    gate = from_yaml("gate/none", name="none", baseline=str(folder), margin=margin, regression=["faithfulness", "hallucination"])
    with pytest.raises(RagexpError) as raised:
        gate.check(["avg_faithfulness", "hallucination_rate"], {"avg_faithfulness": ONE_TEN})
    assert message in str(raised.value)
    from_yaml("gate/none", name="none", baseline=str(folder), margin=0.5, regression=["faithfulness"]).check([], {"avg_faithfulness": ONE_TEN})
