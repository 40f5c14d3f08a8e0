"""No contexts, no context metrics: a system that gives no contexts (a function that returns text,
recorded outputs without a contexts column) gets the metrics its judge reads the contexts for
(`Judge.needs_contexts`) and the hallucination verdict as "not judged", said once, never scored;
the overall score uses what was judged. The same rule in every door: the command line,
ragexp.evaluate (and the pytest plugin through it), the monitor and calibrate --outputs."""
import json

from conftest import compose, run_app

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


def test_recorded_outputs_without_contexts_on_the_command_line_say_so_once(tmp_path):
    path = tmp_path / "outputs.jsonl"
    mixed = [*ROWS[:3], {**ROWS[3], "contexts": ["Component 3 listens on port 7403."]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in mixed))
    done = run_app("dataset=outputs", f"dataset.path={path}", SCORING, "tracker=none", f"hydra.run.dir={tmp_path}/run",
                   f"cache.dir={tmp_path}/cache", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if NO_CONTEXTS in line]
    assert len(lines) == 1 and "3 of 4 answered questions (first: q0, q1, q2)" in lines[0]
    rows = [json.loads(line) for line in (tmp_path / "run" / "questions.jsonl").read_text().splitlines()]
    scored = {r["question_id"]: r["judge_scores"].get("faithfulness") for r in rows}
    assert scored["q3"] is not None and [scored[f"q{i}"] for i in range(3)] == [None] * 3
    assert rows[0]["reasoning"].startswith(f"{NO_CONTEXTS}: context_relevance, faithfulness, claim_hallucination_rate, "
                                           "hallucination not judged | ")
    [results] = json.loads((tmp_path / "run" / "results.json").read_text()).values()
    assert results["not_judged"]["faithfulness"] == f"{NO_CONTEXTS} (3 of 4 judged questions)"
    assert results["n_faithfulness"] == 1  # the mean is over the question that had contexts


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
