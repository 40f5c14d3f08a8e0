"""No contexts, no context metrics: a system that gives no contexts (a function that returns text,
recorded outputs without a contexts column) gets the metrics its judge reads the contexts for
(`Judge.needs_contexts`) and the hallucination verdict as "not judged", said once, never scored;
the overall score uses what was judged. The same rule in every door: the command line,
ragexp.evaluate, the pytest plugin, system=http, the monitor and calibrate --outputs. A row with an
empty context list among rows with contexts is counted and named."""
import json
import subprocess
import sys
import textwrap
import threading
from http.server import ThreadingHTTPServer

import pytest

from conftest import cli_env, compose, run_app
from test_own_system import Faulty

import ragexp
from ragexp.calibrate.outputs import judge_rows, labelled_rows
from ragexp.config.build import build, settings
from ragexp.judges.contract import NO_CONTEXTS
from ragexp.monitor.judging import SampleJudge
from ragexp.run.work import Work

SCORING = "embedder@scoring_embedder=hash"
GROUNDED = {"faithfulness", "context_relevance", "claim_hallucination_rate"}  # the offline judge's needs_contexts
ROWS = [{"id": f"q{i}", "question": f"Which port does component {i} use?", "answer": f"Port {7400 + i}.",
         "reference": f"Port {7400 + i}."} for i in range(4)]


def text_only(question: str) -> str:
    """A system under test as people write it first: the answer as text, no contexts."""
    return "Port " + question.split()[-2].replace("component", "74") + "."


def test_a_function_that_returns_text_is_not_scored_on_contexts_it_never_gave(tmp_path):
    evaluation = ragexp.evaluate(system=text_only, overrides=[SCORING, "dataset.limit=4", "cache.enabled=false"],
                                 output_dir=tmp_path / "run")
    judged = [r for r in evaluation.result.questions if r.judgement is not None]
    assert len(judged) == 4
    assert list(evaluation.table["answer"]) == [r.answer.text for r in evaluation.result.questions]  # the input's name
    for r in judged:
        assert not GROUNDED & set(r.judgement.scores) and r.judgement.hallucination is None
        assert "answer_similarity" in r.judgement.scores  # what needs no contexts is judged as before
    aggregates = evaluation.aggregates
    assert not {"avg_faithfulness", "avg_context_relevance", "hallucination_rate"} & set(aggregates)
    assert aggregates["overall_score"] == aggregates["avg_answer_similarity"]  # weighed alone, no penalty
    said = [n for n in evaluation.result.notes if NO_CONTEXTS in n]
    assert len(said) == 1 and said[0].startswith(f"{NO_CONTEXTS} for every question")
    [results] = json.loads((tmp_path / "run" / "results.json").read_text()).values()
    assert results["not_judged"]["faithfulness"] == f"{NO_CONTEXTS} (4 of 4 judged questions)"
    assert results["not_judged"]["hallucination"] == f"{NO_CONTEXTS} (4 of 4 judged questions)"


def command_line(tmp_path, *args: str) -> tuple[list[str], dict[str, dict], dict]:
    """`python -m ragexp ARGS` with the offline judge on hashed vectors, untracked, its run folder
    under tmp_path: its console lines that say the system gave no contexts, its questions.jsonl rows
    by question id and its results.json values."""
    done = run_app(*args, SCORING, "tracker=none", f"hydra.run.dir={tmp_path}/run", f"cache.dir={tmp_path}/cache",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "questions.jsonl").read_text().splitlines()]
    [results] = json.loads((tmp_path / "run" / "results.json").read_text()).values()
    return [line for line in done.stdout.splitlines() if NO_CONTEXTS in line], {r["question_id"]: r for r in rows}, results


def outputs_file(tmp_path, rows: list[dict]) -> str:
    path = tmp_path / "outputs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_recorded_outputs_without_contexts_on_the_command_line_say_so_once(tmp_path):
    mixed = [*ROWS[:3], {**ROWS[3], "contexts": ["Component 3 listens on port 7403."]}]
    lines, rows, results = command_line(tmp_path, "dataset=outputs", f"dataset.path={outputs_file(tmp_path, mixed)}")
    assert len(lines) == 1 and "3 of 4 answered questions (first: q0, q1, q2)" in lines[0]
    scored = {q: r["judge_scores"].get("faithfulness") for q, r in rows.items()}
    assert scored["q3"] is not None and [scored[f"q{i}"] for i in range(3)] == [None] * 3
    assert rows["q0"]["reasoning"].startswith(f"{NO_CONTEXTS}: context_relevance, faithfulness, claim_hallucination_rate, "
                                              "hallucination not judged | ")
    assert results["not_judged"]["faithfulness"] == f"{NO_CONTEXTS} (3 of 4 judged questions)"
    assert results["n_faithfulness"] == 1  # the mean is over the question that had contexts


def test_an_empty_context_list_among_rows_with_contexts_is_counted_and_named(tmp_path):
    given = [{**r, "contexts": [] if r["id"] == "q2" else [f"Component {i} listens on port {7400 + i}."]}
             for i, r in enumerate(ROWS)]
    lines, rows, results = command_line(tmp_path, "dataset=outputs", f"dataset.path={outputs_file(tmp_path, given)}")
    assert len(lines) == 1 and "1 of 4 answered questions (first: q2)" in lines[0]
    assert [q for q, r in rows.items() if "faithfulness" not in r["judge_scores"]] == ["q2"]
    assert rows["q2"]["status"] == "judged" and rows["q2"]["reasoning"].startswith(f"{NO_CONTEXTS}: ")
    assert results["not_judged"]["hallucination"] == f"{NO_CONTEXTS} (1 of 4 judged questions)"
    assert results["n_faithfulness"] == results["n_hallucination_rate"] == 3
    assert results["n_overall_score"] == 3  # as the note says: over the questions that had contexts


def test_an_http_service_that_answers_without_contexts_is_not_scored_on_them(tmp_path):
    service = ThreadingHTTPServer(("127.0.0.1", 0), Faulty)  # answers a `nocontexts...` question with no contexts
    service.asked = []
    threading.Thread(target=service.serve_forever, daemon=True).start()
    asked = [{"id": r["id"], "question": f"nocontexts: {r['question']}", "reference": r["reference"]} for r in ROWS]
    try:
        lines, rows, results = command_line(
            tmp_path, "system=http", f"system.url=http://127.0.0.1:{service.server_address[1]}/answer",
            "system.contexts_field=null", "dataset=outputs", f"dataset.path={outputs_file(tmp_path, asked)}")
    finally:
        service.shutdown()
    assert sorted(service.asked) == sorted(r["question"] for r in asked)  # a real request per question
    assert len(lines) == 1 and f"{NO_CONTEXTS} for every question" in lines[0]
    assert all(r["status"] == "judged" and r["answer"] == "fine" for r in rows.values())
    assert all(not GROUNDED & set(r["judge_scores"]) and "answer_similarity" in r["judge_scores"] for r in rows.values())
    assert not {"avg_faithfulness", "avg_context_relevance", "hallucination_rate"} & set(results)
    assert results["not_judged"]["faithfulness"] == f"{NO_CONTEXTS} (4 of 4 judged questions)"
    assert results["overall_score"] == results["avg_answer_similarity"]


SUITE = '''
GROUNDED = {grounded!r}
FAST = ["{scoring}", "cache.enabled=false"]


def text_only(question):
    return "Port 7400."


def test_a_function_that_returns_text(ragexp_evaluate):
    evaluation = ragexp_evaluate(system=text_only, overrides=FAST + ["dataset.limit=3"])
    judged = [r for r in evaluation.result.questions if r.judgement is not None]
    assert len(judged) == 3
    assert all(not GROUNDED & set(r.judgement.scores) and r.judgement.hallucination is None for r in judged)


def test_recorded_outputs_without_contexts(ragexp_evaluate):
    evaluation = ragexp_evaluate({rows!r}, overrides=FAST)
    assert "avg_faithfulness" not in evaluation.aggregates and evaluation.aggregates["total_questions"] == 4
'''


@pytest.mark.process
def test_the_pytest_plugin_says_once_at_the_end_which_metrics_it_left_out(tmp_path):
    (tmp_path / "test_rag.py").write_text(textwrap.dedent(SUITE).format(grounded=GROUNDED, scoring=SCORING, rows=ROWS))
    junit = tmp_path / "junit.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "test_rag.py",
                           f"--junitxml={junit}", "-q"], cwd=tmp_path, capture_output=True, text=True, env=cli_env(),
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
    lines = [line for line in proc.stdout.splitlines() if NO_CONTEXTS in line]
    assert len(lines) == 1, proc.stdout  # the same note of the two tests' runs, said once under pytest-xdist
    assert lines[0].startswith(f"{NO_CONTEXTS} for every question: context_relevance, faithfulness, ")
    assert lines[0].endswith(" and 1 more)") and "(test_rag.py::test_" in lines[0]
    assert proc.stdout.index("ragexp notes") < proc.stdout.index(lines[0])
    assert junit.read_text().count('<property name="ragexp_note" value="the system gave no contexts for every') == 2


def test_the_monitor_and_calibrate_leave_them_out_too(tmp_path):
    cfg = compose(SCORING, f"cache.dir={tmp_path / 'cache'}", "dataset=outputs")
    work = Work(build(cfg.cache))
    with work.embeddings.building():
        judge = build(cfg.judge)
    [sampled] = SampleJudge(judge, work, settings(cfg.judge)).judge_all([("log:1", ROWS[0]["question"], [], "Port 7400.")])
    assert sampled.judgement is not None and not GROUNDED & set(sampled.judgement.scores)
    assert sampled.judgement.hallucination is None

    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps({**r, "hallucination": "no"}) + "\n" for r in ROWS))
    rows, _ = labelled_rows(path, cfg)
    _, judged = judge_rows(rows, cfg)
    assert all(not GROUNDED & set(j.scores) and j.hallucination is None for j in judged)


def test_a_gate_on_a_metric_that_was_not_judged_fails_saying_why(tmp_path):
    evaluation = ragexp.evaluate(system=text_only, overrides=[SCORING, "dataset.limit=2", "cache.enabled=false",
                                                             "+gate.thresholds.faithfulness.min=5"],
                                 output_dir=tmp_path / "run")
    assert not evaluation.passed
    assert f"faithfulness: not judged in this run ({NO_CONTEXTS}): FAILED" in evaluation.result.gate.checks
