"""judge=cascade with a rubric as the expensive judge: its criterion, named otherwise than the cheap
judge's metrics, is paired with the cheap metric that predicts it (judge.pairs), on another scale
(the tuned line maps one onto the other); bad pairs are one line before any work."""
import pytest

from ragexp import evaluate
from ragexp.errors import RagexpError

ROWS = [{"id": f"q{i}", "question": f"Which port does service {i} listen on?",
         "contexts": [f"Service {i} listens on port {7000 + i}."],
         "answer": f"Service {i} listens on port {7000 + i}." if i % 3 else "Bananas are yellow and grow in bunches.",
         "reference": f"Port {7000 + i}."} for i in range(24)]
RUBRIC = """_target_: ragexp.judges.rubric.Rubric
name: kept
mode: single_call
criteria:
  on_topic:
    type: python
    instructions: The answer keeps to the question.
    function: cascade_pair_checks:on_topic
    scale: 1-5
"""


@pytest.fixture
def rubric_conf(tmp_path, monkeypatch):
    (tmp_path / "cascade_pair_checks.py").write_text(
        "def on_topic(question, contexts, answer, reference, row):\n    return 1 if 'Bananas' in answer else 5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "conf" / "rubric").mkdir(parents=True)
    (tmp_path / "conf" / "rubric" / "kept.yaml").write_text(RUBRIC)
    return tmp_path / "conf"


def cascade(*more: str) -> list[str]:
    return ["judge=cascade", "judge@judge.expensive=rubric", "rubric=kept", "embedder@scoring_embedder=hash",
            "cache.enabled=false", *more]


def test_a_rubric_criterion_is_corrected_from_the_cheap_metric_paired_with_it(rubric_conf, tmp_path):
    every = evaluate(ROWS, overrides=cascade("judge.sample=24", "judge.pairs={on_topic: faithfulness}"),
                     config_dir=rubric_conf, output_dir=tmp_path / "every")
    truth = (16 * 5 + 8 * 1) / 24  # the rubric on every question
    assert every.aggregates["avg_on_topic"] == pytest.approx(truth, abs=1e-4)  # all drawn: the estimate is the rubric's mean
    assert every.aggregates["avg_faithfulness"] == pytest.approx(every.aggregates["avg_faithfulness_cheap"])  # the cheap one's
    some = evaluate(ROWS, overrides=cascade("judge.sample=0.5", "judge.pairs={on_topic: faithfulness}"),
                    config_dir=rubric_conf, output_dir=tmp_path / "some")
    table = some.table
    drawn = table["judged_by"] == "cheap+expensive"
    assert 0 < drawn.sum() < 24 and table.loc[drawn, "on_topic_expensive"].notna().all()
    assert some.aggregates["avg_on_topic"] == pytest.approx(table["on_topic"].mean(), abs=1e-4)  # the mean of its terms
    assert any("on_topic (from the cheap faithfulness)" in n for n in some.result.notes)


@pytest.mark.parametrize("pairs, message", [
    ("{nope: faithfulness}", "judge.pairs.nope: judge 'rubric-kept' gives no 'nope' (it gives on_topic)"),
    ("{on_topic: nope}", "judge.pairs.on_topic: judge 'offline-hash' gives no 'nope'"),
    (None, "has no metric in common with judge.cheap"),
])
def test_bad_pairs_are_one_line(rubric_conf, tmp_path, pairs, message):
    with pytest.raises(RagexpError, match=message.replace("(", r"\(").replace(")", r"\)")):
        evaluate(ROWS, overrides=cascade(*([f"judge.pairs={pairs}"] if pairs else [])), config_dir=rubric_conf,
                 output_dir=tmp_path / "run")
    with pytest.raises(RagexpError, match="judge.pairs.on_topic: on_topic is on .* and faithfulness on .*judge.tune=true"):
        evaluate(ROWS, overrides=cascade("judge.pairs={on_topic: faithfulness}", "judge.tune=false"),
                 config_dir=rubric_conf, output_dir=tmp_path / "plain")
