"""Checks that never pass silently: the regression check of `assert_no_regression` and
`gate.baseline` gives the smallest drop its questions detect, and with no margin fails as "too
few questions to tell" when that drop is above a tenth of the metric's scale (unless accepted);
rows without ids pair by their question's text, so a ragas-column file is a baseline.

The committed case (tests/data/ten_questions): 10 questions in ragas' columns, no id; the baseline
hallucinates on 5 of them, the broken run on 8 (3 good answers broken): hallucination 0.5 -> 0.8,
not significant after Holm across the metrics, and 10 questions detect only a drop of 3.73 in
faithfulness (1-10) — a pass that said nothing, before."""
import json
import math
from pathlib import Path

import pytest

from ragexp import evaluate
from ragexp.base.pairing import DIGEST_PREFIX, pairing_id
from ragexp.errors import RagexpError
from ragexp.metrics.regression import TELLS, Regression
from ragexp.pytest_plugin import assert_no_regression

DATA = Path(__file__).parent / "data" / "ten_questions"
FAST = ["embedder@scoring_embedder=hash", "cache.enabled=false"]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    return evaluate(DATA / "baseline.jsonl", overrides=FAST, output_dir=tmp_path_factory.mktemp("baseline"))


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    return evaluate(DATA / "broken.jsonl", overrides=FAST, output_dir=tmp_path_factory.mktemp("broken"))


def test_the_committed_case_is_what_it_says(baseline, broken):
    assert baseline.aggregates["hallucination_rate"] == 0.5 and broken.aggregates["hallucination_rate"] == 0.8
    assert all(q.question.id_from_row for q in baseline.result.questions)  # ragas' columns: no id column


def test_ten_questions_fail_as_too_few_to_tell_with_the_drop_they_detect(baseline, broken):
    with pytest.raises(pytest.fail.Exception) as failed:
        assert_no_regression(broken, baseline=str(baseline.folder))
    message = str(failed.value)
    assert "too few questions to tell on" in message and "10 shared questions" in message
    assert "accept_low_power=True" in message and "python -m ragexp.plan" in message
    line = next(text for text in message.splitlines() if text.strip().startswith("faithfulness:"))
    assert "detects a drop of 3.73 (80% power), more than 0.9 (10% of its 1-10 scale)" in line
    assert line.endswith("too few questions to tell: FAILED")
    hallucination = next(text for text in message.splitlines() if text.strip().startswith("hallucination:"))
    assert "0.8000 vs baseline 0.5000" in hallucination and "FAILED" in hallucination


def test_accepting_the_power_passes_and_a_margin_is_a_drop_the_user_chose(baseline, broken):
    assert_no_regression(broken, baseline=str(baseline.folder), accept_low_power=True)
    assert_no_regression(broken, baseline=str(baseline.folder), metrics=["faithfulness", "hallucination"],
                         margin={"faithfulness": 3.0, "hallucination": 0.3})
    with pytest.raises(pytest.fail.Exception, match="too few questions to tell on hallucination "):
        assert_no_regression(broken, baseline=str(baseline.folder), metrics=["faithfulness", "hallucination"],
                             margin={"faithfulness": 3.0})


def test_the_gate_fails_the_same_case_and_says_how_to_tell(baseline, tmp_path):
    gated = evaluate(DATA / "broken.jsonl", overrides=[*FAST, f"gate.baseline={baseline.folder}"],
                     output_dir=tmp_path / "gated")
    assert not gated.passed
    checks = gated.result.gate.checks
    assert any(c.startswith("faithfulness:") and c.endswith("too few questions to tell: FAILED") for c in checks)
    assert any("gate.accept_low_power=true" in c for c in checks)
    assert gated.aggregates["gate_thresholds_passed"] == 0  # a sweep's correction across jobs keeps it failed
    accepted = evaluate(DATA / "broken.jsonl", overrides=[*FAST, f"gate.baseline={baseline.folder}",
                                                          "gate.accept_low_power=true"], output_dir=tmp_path / "accepted")
    assert accepted.passed, accepted.result.gate.checks
    assert any(c.endswith("too few questions to tell (accepted): ok") for c in accepted.result.gate.checks)


def test_rows_without_ids_pair_by_their_question_not_their_place(baseline, tmp_path):
    rows = [json.loads(line) for line in (DATA / "baseline.jsonl").read_text().splitlines()]
    reordered = evaluate(list(reversed(rows)), overrides=FAST, output_dir=tmp_path / "reordered")
    assert [q.question.qid for q in reordered.result.questions][:2] == ["q1", "q2"]  # other questions than the baseline's q1, q2
    assert_no_regression(reordered, baseline=str(baseline.folder))  # every difference 0: it detects any drop
    same = evaluate([*rows[:3], rows[0]], overrides=FAST, output_dir=tmp_path / "twice")
    with pytest.raises(pytest.fail.Exception, match=r"rows q1 and q4 both ask 'Which port does quarryd listen on\?'"):
        assert_no_regression(same, baseline=str(baseline.folder))
    with pytest.raises(RagexpError, match=r"rows q1 and q4 both ask"):
        evaluate([*rows[:3], rows[0]], overrides=[*FAST, f"gate.baseline={baseline.folder}"], output_dir=tmp_path / "g")
    with pytest.raises(RagexpError, match=r"the rows of the baseline .*twice have no id .* rows q1 and q4 both ask"):
        evaluate(rows, overrides=[*FAST, f"gate.baseline={same.folder}"], output_dir=tmp_path / "h")


def test_the_pairing_id_is_the_given_id_or_a_digest_of_the_text():
    assert pairing_id("port-1", "Which port?", False) == "port-1"
    made = pairing_id("q1", "Which  port?\n", True)
    assert made == pairing_id("q7", "Which port?", True) and made.startswith(DIGEST_PREFIX) and len(made) == 21
    assert made != pairing_id("q1", "Which Port?", True)


def regression(detectable: float, margin: float = 0.0, scale=(1.0, 10.0), adjusted: float = 0.5) -> Regression:
    return Regression("faithfulness", 10, 7.0, 7.5, -0.5, -1.0, 0.1, 0.2, adjusted, margin, detectable, scale)


@pytest.mark.parametrize("case, too_few", [
    (regression(0.9), False),                        # a tenth of 1-10 exactly: it can tell
    (regression(0.91), True),
    (regression(0.91, margin=0.5), False),           # a margin given: the user chose the drop that matters
    (regression(0.91, scale=None), False),           # no scale known: nothing to measure a tenth of
    (regression(0.2, scale=(0.0, 1.0)), True),
    (regression(math.inf), True),                    # one shared question
])
def test_too_few_is_a_drop_detected_above_a_tenth_of_the_scale(case, too_few):
    assert TELLS == 0.1
    assert case.too_few is too_few
    line = case.line(0.05, 0.95)
    assert line.endswith("too few questions to tell: FAILED" if too_few else "not significantly worse: ok")
