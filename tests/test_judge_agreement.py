"""The agreement bench (bench/judge_agreement.py): its statistics, the shipped labelled sample and
its deterministic split, and the LLM judges' request path and parsing on the sample's real texts."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import judge_agreement as ja  # noqa: E402

SAMPLE = ROOT / "tests" / "data" / "judge_agreement_sample.jsonl"


def sample():
    return [ja.from_row(json.loads(line)) for line in SAMPLE.read_text().splitlines()]


def test_roc_auc_counts_pairs_and_halves_ties():
    # pairs (positive, negative): 0.35>0.1 yes, 0.35>0.4 no, 0.8 beats both -> 3 of 4
    assert ja.roc_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == pytest.approx(0.75)
    assert ja.roc_auc([1, 1, 1, 1], [False, True, False, True]) == pytest.approx(0.5)
    assert ja.roc_auc([0.2, 0.9, 0.5], [False, True, True]) == pytest.approx(1.0)
    assert ja.roc_auc([0.2, 0.9], [True, True]) is None


def test_flag_figures_against_people():
    # supported items: 1 of 4 flagged (false alarm 0.25); unsupported: 2 of 2 caught
    got = ja.flag_figures([True, False, False, False, True, True], [True, True, True, True, False, False])
    assert got == {"balanced_accuracy": 0.875, "false_alarm": 0.25, "caught": 1.0}


def test_the_shipped_sample_is_labelled_tuning_data_of_both_kinds():
    items = sample()
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    assert len(items) == 36 and sum(i.supported for i in items) == 18
    assert all(row["part"] == "tune" == ja.from_row(row).part for row in rows)  # the split is a hash, not a draw
    assert all(i.passages and i.answer and i.set in ja.SOURCES for i in items)


@pytest.mark.parametrize("option", ["llm", "triad"])
def test_the_llm_judges_path_keeps_every_verdict_on_real_texts(option, tmp_path):
    """The scripted server repeats the people's verdicts, so any loss is the request path's or the
    parser's: every item is judged and the flags and scores reproduce the labels exactly."""
    items = sample()
    verdicts, failed = ja.llm_verdicts(option, items, tmp_path)
    got = ja.figures(verdicts, items)
    assert failed == 0 and got["roc_auc"] == 1.0 and got["balanced_accuracy"] == 1.0 and got["false_alarm"] == 0.0
