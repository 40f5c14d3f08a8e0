"""The pytest plugin: a team's tests evaluate their RAG system and assert on it (a pass, a threshold
missed, a regression against a baseline), with failure messages that say what failed, also in
pytest's JUnit XML; loading it imports neither hydra nor mlflow."""
import re
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import pytest

from conftest import cli_env
from ragexp import evaluate
from ragexp.pytest_plugin import assert_no_regression, assert_passed

FAST = ["embedder@scoring_embedder=hash", "cache.enabled=false"]
FACTS = [(f"Which port does service {n} use?", f"Service {n} listens on port {7000 + n}.") for n in range(12)]


def rows(supported: bool) -> list[dict]:
    """Answers that repeat their context, or answers no context sentence holds."""
    return [{"id": f"q{n}", "question": q, "contexts": [fact],
             "answer": fact if supported else f"The moon of planet {n} is made of green cheese and jazz."}
            for n, (q, fact) in enumerate(FACTS)]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    return evaluate(rows(True), overrides=FAST, output_dir=tmp_path_factory.mktemp("baseline"))


def test_the_entry_point_registers_the_plugin_with_pytest():
    assert [e.value for e in entry_points(group="pytest11") if e.name == "ragexp"] == ["ragexp.pytest_plugin"]


def test_loading_the_plugin_imports_neither_hydra_nor_mlflow():
    code = ("import sys, ragexp.pytest_plugin; "
            "print(sorted(m for m in ('hydra', 'omegaconf', 'mlflow', 'torch', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=True)
    assert out.stdout.strip() == "[]"


def test_no_regression_against_the_same_answers_and_a_named_one_against_worse(baseline, tmp_path):
    assert_no_regression(evaluate(rows(True), overrides=FAST, output_dir=tmp_path / "same"), baseline=str(baseline.folder))
    worse = evaluate(rows(False), overrides=FAST, output_dir=tmp_path / "worse")
    with pytest.raises(pytest.fail.Exception) as failed:
        assert_no_regression(worse, baseline=str(baseline.folder))
    message = str(failed.value)
    assert f"significantly worse than {baseline.folder}" in message and "12 shared questions" in message
    assert "faithfulness: 1.0000 vs baseline 10.0000 on 12 questions, difference -9.0000" in message
    assert "questions that dropped most on faithfulness:" in message and "q0: 10 -> 1" in message
    assert_no_regression(worse, baseline=str(baseline.folder), metrics=["context_relevance"])  # not worse there


def test_a_failed_gate_says_its_checks_and_the_worst_questions(tmp_path):
    evaluation = evaluate(rows(False), overrides=[*FAST, "+gate.thresholds.faithfulness.min=9"], output_dir=tmp_path)
    with pytest.raises(pytest.fail.Exception) as failed:
        assert_passed(evaluation)
    message = str(failed.value)
    assert "gate none:" in message and re.search(r"avg_faithfulness = 1.0000 \[95% CI 1.0000, 1.0000\] >= 9: FAILED", message)
    assert "worst questions (of 12):" in message and "q0: faithfulness 1: Which port does service 0 use?" in message


def test_without_a_baseline_the_failure_says_how_to_give_one(baseline):
    with pytest.raises(pytest.fail.Exception, match="--ragexp-baseline"):
        assert_no_regression(baseline)


SUITE = '''
from ragexp.pytest_plugin import assert_no_regression, assert_passed

ROWS = {rows}
FAST = {fast}


def test_supported_answers_pass(ragexp_evaluate):
    assert_passed(ragexp_evaluate(ROWS["good"], overrides=FAST + ["+gate.thresholds.faithfulness.min=9"]))


def test_a_threshold_missed(ragexp_evaluate):
    assert_passed(ragexp_evaluate(ROWS["bad"], overrides=FAST + ["+gate.thresholds.faithfulness.min=9"]))


def test_a_regression(ragexp_evaluate):
    assert_no_regression(ragexp_evaluate(ROWS["bad"], overrides=FAST))
'''


@pytest.mark.process
def test_a_suite_of_three_under_xdist_passes_one_and_fails_two_with_their_reasons(baseline, tmp_path):
    (tmp_path / "test_rag.py").write_text(textwrap.dedent(SUITE).format(
        rows=repr({"good": rows(True), "bad": rows(False)}), fast=repr(FAST)))
    junit = tmp_path / "junit.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "test_rag.py",
                           f"--ragexp-baseline={baseline.folder}", f"--junitxml={junit}", "-q"],
                          cwd=tmp_path, capture_output=True, text=True, env=cli_env(), timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "2 failed, 1 passed" in proc.stdout
    report = junit.read_text()
    assert report.count("<failure") == 2
    assert "avg_faithfulness = 1.0000 [95% CI 1.0000, 1.0000] &gt;= 9: FAILED" in report
    assert "significantly worse than" in report and "questions that dropped most on faithfulness" in report
    assert not (tmp_path / "outputs").exists()  # each run went to its test's own temporary folder
