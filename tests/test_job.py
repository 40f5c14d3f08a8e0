"""One job for every door (ragexp.run.job): the same config through `python -m ragexp` and
`ragexp.evaluate` gives a run of the same name, params and aggregates in MLflow; a run of recorded
outputs is named after its file; the dry run is its own `estimate`."""
import json

import pytest

import ragexp
from conftest import HASH, compose, mlflow_runs, run_app
from ragexp.errors import RagexpError
from ragexp.run.pipeline import estimate, run

ARGS = (*HASH, "retriever=bm25", "reranker=mmr", "dataset.limit=4")


def test_the_command_line_and_the_api_name_check_write_and_log_a_run_alike(tmp_path):
    cli, api = tmp_path / "cli", tmp_path / "api"
    for folder in (cli, api):
        folder.mkdir()
    store = f"tracker.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"
    proc = run_app(*ARGS, store, f"cache.dir={tmp_path / 'cache'}", "hydra.run.dir=" + str(cli / "run"), cwd=cli)
    assert proc.returncode == 0, proc.stderr
    evaluation = ragexp.evaluate(overrides=[*ARGS, store, f"cache.dir={tmp_path / 'cache'}"], track=True,
                                 output_dir=api / "run")
    _, runs = mlflow_runs(tmp_path)
    assert len(runs) == 2
    by_door = {("cli" if r.info.run_id != evaluation.run_id else "api"): r for r in runs}
    cli_run, api_run = by_door["cli"], by_door["api"]
    assert cli_run.info.run_name == api_run.info.run_name == "sample-recursive-hash-bm25-mmr-extractive"
    assert cli_run.data.params == api_run.data.params
    timing = ("time", "seconds", "_s", "cpu", "work_")  # how long it took, and what the shared cache spared the second
    kept = {k: v for k, v in cli_run.data.metrics.items() if not any(t in k for t in timing)}
    assert kept and kept == {k: v for k, v in api_run.data.metrics.items() if not any(t in k for t in timing)}
    assert json.loads((cli / "run" / "results.json").read_text()) == json.loads((api / "run" / "results.json").read_text())


def test_a_run_of_recorded_outputs_is_named_after_its_file(tmp_path):
    path = tmp_path / "answers.jsonl"
    path.write_text(json.dumps({"question": "Which port?", "answer": "Port 7070.",
                                "contexts": ["quarryd listens on port 7070."]}) + "\n")
    args = ["embedder@scoring_embedder=hash", f"cache.dir={tmp_path / 'cache'}"]
    evaluation = ragexp.evaluate(path, overrides=args, output_dir=tmp_path / "run")
    assert evaluation.result.name == "answers-recorded"
    named = ragexp.evaluate(path, overrides=[*args, "run_name=mine"], output_dir=tmp_path / "named")
    assert named.result.name == "mine"


def test_the_dry_run_is_its_own_estimate(tmp_path):
    args = (*HASH, "retriever=bm25", "dataset.limit=3", f"cache.dir={tmp_path / 'cache'}")
    planned = estimate(compose(*args, "judge=llm"), "planned")
    assert planned.requests == 3  # one judge request per question, none made
    with pytest.raises(RagexpError, match="dry_run=true"):
        run(compose(*args, "dry_run=true"))


def test_a_bad_option_through_the_api_lists_the_options_as_the_command_line_does(tmp_path):
    with pytest.raises(RagexpError, match=r"Could not find 'judge/nosuchjudge'; the options: .*offline, .*triad"):
        ragexp.evaluate(overrides=["judge=nosuchjudge"], output_dir=tmp_path / "run")


def test_evaluate_takes_the_system_under_test_as_a_function_as_predict_fn_does(tmp_path):
    """`ragexp.evaluate(rows, system=fn)`: fn(question) or fn(question, params), async or not, returning
    a dict, a SystemOutput or the answer as text; a lambda too. Its answers are cached under its code."""
    rows = [{"question": "Which port does quarryd listen on?", "reference": "Port 7070."},
            {"question": "Which user ID does it run as?", "reference": "10001"}]
    context = {"Which port does quarryd listen on?": "quarryd listens on port 7070.",
               "Which user ID does it run as?": "quarryd runs as user ID 10001."}
    calls = []

    def answer(question):
        calls.append(question)
        return {"answer": context[question].split()[-1].rstrip("."), "contexts": [context[question]]}

    async def answer_async(question, params):
        return ragexp.SystemOutput(answer=context[question].split()[-1].rstrip("."), contexts=[context[question]])

    args = ["embedder@scoring_embedder=hash", f"cache.dir={tmp_path / 'cache'}"]
    for n, fn in enumerate((answer, answer_async, lambda question: "7070")):
        evaluation = ragexp.evaluate(rows, system=fn, overrides=args, output_dir=tmp_path / f"run{n}")
        assert evaluation.aggregates["failed_questions"] == 0
        assert evaluation.result.questions[0].answer.text == "7070"
    assert len(calls) == 2
    again = ragexp.evaluate(rows, system=answer, overrides=args, output_dir=tmp_path / "again")
    assert len(calls) == 2 and again.result.counters["system_calls"] == 0  # answered from the cache
    with pytest.raises(RagexpError, match="system: expected a function"):
        ragexp.evaluate(rows, system="my_rag:answer", output_dir=tmp_path / "bad")


def test_with_no_gate_set_the_targets_decide_whether_an_evaluation_passed(tmp_path):
    """`Evaluation.passed` was True whenever no gate was set (hallucination_rate 0.75 and overall 0
    included), so `assert result.passed` always passed: the targets now act as a gate named `targets`."""
    context = "quarryd listens on port 7070."
    rows = [{"question": "Which port?", "reference": "Port 7070.", "answer": "Port 7070.", "contexts": [context]},
            {"question": "Which user?", "reference": "10001", "answer": "It runs on Mars as a potato named Bob.",
             "contexts": [context]}]
    args = ["embedder@scoring_embedder=hash", f"cache.dir={tmp_path / 'cache'}"]
    invented = ragexp.evaluate(rows[1:], overrides=args, output_dir=tmp_path / "bad")
    assert invented.gate == "targets" and invented.warnings and not invented.passed
    assert "gate 'targets' FAILED" in repr(invented)
    gated = ragexp.evaluate(rows[1:], overrides=[*args, "gate=production", "~gate.thresholds.answer_relevance",
                                                "~gate.thresholds.mrr", "~gate.thresholds.hit_rate_at_5",
                                                "gate.thresholds.faithfulness.min=0"], output_dir=tmp_path / "gated")
    assert gated.gate == "production" and gated.warnings and gated.passed  # the gate set decides, not the targets


def test_a_stop_inside_a_run_names_where_it_came_from():
    from ragexp.run.job import stopped_by

    def interrupted():
        raise KeyboardInterrupt

    def generator_closed():
        raise GeneratorExit

    for stop, words in ((interrupted, "the run was interrupted (KeyboardInterrupt in interrupted() at"),
                        (generator_closed, "GeneratorExit was raised in generator_closed() at")):
        try:
            stop()
        except BaseException as err:  # noqa: BLE001 - what the job catches
            message = str(stopped_by(err))
        assert message.startswith(words) and "test_job.py:" in message
