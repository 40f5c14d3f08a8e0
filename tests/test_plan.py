"""The power planner: its promise checked by simulating the gate's own paired one-sided t-test, and
`python -m ragexp.plan` on a real run folder."""
import json

import numpy as np
import pytest
from scipy import stats

from ragexp.plan import main
from ragexp.stats.power import detectable, difference_spread, questions
from conftest import HASH, run_app


@pytest.mark.parametrize("delta, spread", [(0.5, 2.0), (0.05, 0.3), (0.3, 1.0)])
def test_the_planned_questions_detect_the_drop_as_often_as_promised(delta, spread):
    """2,000 simulated pairs of runs whose per-question differences have mean -delta and that
    spread: the gate's test (one-sided paired t at 0.05) detects the drop in 80% +- 3 points."""
    n = questions(delta, spread)
    rng = np.random.default_rng(1)
    d = rng.normal(-delta, spread, size=(2000, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / np.sqrt(n))
    detected = np.mean(stats.t.cdf(t, n - 1) < 0.05)
    assert abs(detected - 0.8) <= 0.03, (n, detected)
    assert detectable(n, spread) <= delta < detectable(n - 1, spread)  # the fewest that do
    assert difference_spread(1.0) == pytest.approx(np.sqrt(2)) and difference_spread(1.0, 0.5) == pytest.approx(1.0)


def test_plan_reads_a_run_and_answers_both_questions(tmp_path, capsys):
    assert run_app("retriever=bm25", *HASH, "tracker=none", "dataset.limit=20", "hydra.run.dir=run", cwd=tmp_path).returncode == 0
    table = json.loads((tmp_path / "run" / "questions.json").read_text())
    column = table["columns"].index("answer_similarity")
    sd = float(np.std([row[column] for row in table["data"]], ddof=1))
    assert main([str(tmp_path / "run"), "--metric", "answer_similarity", "--drop", "0.5"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"answer_similarity (sd {sd:.3g} over 20 questions; differences' sd {np.sqrt(2) * sd:.3g}")
    assert f"a drop of 0.5 needs {questions(0.5, np.sqrt(2) * sd)} questions (80% power, one-sided alpha 0.05, paired)" in line
    assert main([str(tmp_path / "run"), "--metric", "answer_similarity"]) == 0
    assert f"20 questions detect a drop of {detectable(20, np.sqrt(2) * sd):.3g}" in capsys.readouterr().out
    assert main([str(tmp_path / "run"), "--metric", "answer_relevance", "--drop", "0.1"]) == 2
    assert "ragexp.plan: error: --metric answer_relevance: the run has no per-question answer_relevance" in capsys.readouterr().err
