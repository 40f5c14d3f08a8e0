"""`judge=mlflow`: MLflow's built-in scorers and `make_judge` judges as ragexp's judge, their
requests on the local OpenAI-protocol test server (through MLflow's own OpenAI provider): metrics
on 0-1, rationales as reasoning, the stage cache, the gate, bad settings before any work."""
import json
import os

import pytest

from conftest import TEST_KEY_ENV
from ragexp.errors import RagexpError

CONTEXT = "quarryd listens on port 7070."


def rows(count: int = 4) -> list[dict]:
    """Half the answers right, half about something else; every row has its reference."""
    return [{"id": f"port-{i}", "question": f"Which port does quarryd use, case {i}?", "contexts": [CONTEXT],
             "answer": "Port 7070." if i % 2 else "Bananas are yellow.", "reference": "Port 7070."}
            for i in range(count)]


def verdicts(body: dict) -> str:
    """The scripted judge model: no for the bananas, yes otherwise, with a rationale naming it."""
    text = json.dumps(body)
    verdict = "no" if "Bananas" in text else "yes"
    return json.dumps({"result": verdict, "rationale": f"scripted {verdict}"})


def overrides(server, *more: str) -> list[str]:
    return ["judge=mlflow", f"judge.endpoint.base_url={server.base_url}", f"judge.endpoint.api_key_env={TEST_KEY_ENV}",
            "embedder@scoring_embedder=hash", *more]


SCORERS = ("judge.scorers=[RelevanceToQuery,'mlflow.genai.scorers:Correctness',"  # a scorer by module:Class too
           "{name: port_stated, instructions: 'Does {{ outputs }} state the port that {{ inputs }} asks for?'}]")


def test_built_in_and_make_judge_scorers_judge_every_question(server, tmp_path, monkeypatch):
    import ragexp

    monkeypatch.setenv(TEST_KEY_ENV, "sk-test")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    server.chat = verdicts
    evaluation = ragexp.evaluate(rows(), overrides=overrides(server, SCORERS, f"cache.dir={tmp_path / 'cache'}"),
                                 output_dir=tmp_path / "run")
    values = evaluation.result.aggregates
    assert values["failed_questions"] == 0
    assert values["avg_relevance_to_query"] == values["avg_correctness"] == values["avg_port_stated"] == 0.5
    assert values["overall_score"] == pytest.approx(0.5)  # their mean, on 0-1
    assert len(server.chat_requests()) == 3 * 4  # one request a scorer and question, to the configured endpoint
    judged = [json.loads(line) for line in (tmp_path / "run" / "questions.jsonl").read_text().splitlines()]
    bananas = next(q for q in judged if q["answer"].startswith("Bananas"))
    assert bananas["judge_scores"] == {"relevance_to_query": 0.0, "correctness": 0.0, "port_stated": 0.0}
    assert "relevance_to_query: scripted no" in bananas["reasoning"]
    assert "OPENAI_API_BASE" not in os.environ  # given to MLflow while judging only
    # the stage cache: judged again, nothing is asked again
    again = ragexp.evaluate(rows(), overrides=overrides(server, SCORERS, f"cache.dir={tmp_path / 'cache'}"),
                            output_dir=tmp_path / "again")
    assert again.result.aggregates["avg_correctness"] == 0.5 and len(server.chat_requests()) == 12
    # gated like any judge's metric
    gated = ragexp.evaluate(rows(), overrides=overrides(server, SCORERS, f"cache.dir={tmp_path / 'cache'}",
                                                        "+gate.thresholds.relevance_to_query.min=0.9"),
                            output_dir=tmp_path / "gated")
    assert not gated.passed and any("avg_relevance_to_query = 0.5000" in c for c in gated.result.gate.checks)


def test_a_scorer_that_needs_the_expected_answer_skips_questions_without_one(server, tmp_path, monkeypatch):
    import ragexp

    monkeypatch.setenv(TEST_KEY_ENV, "sk-test")
    monkeypatch.chdir(tmp_path)
    server.chat = verdicts
    unlabelled = [{k: v for k, v in row.items() if k != "reference"} for row in rows(2)]
    evaluation = ragexp.evaluate(unlabelled, overrides=overrides(server, "judge.scorers=[RelevanceToQuery,Correctness]"),
                                 output_dir=tmp_path / "run")
    assert "avg_correctness" not in evaluation.result.aggregates
    assert evaluation.result.aggregates["avg_relevance_to_query"] == 0.5
    assert len(server.chat_requests()) == 2


def test_a_failed_scorer_request_fails_its_question_with_the_reason(server, tmp_path, monkeypatch):
    import ragexp

    monkeypatch.setenv(TEST_KEY_ENV, "sk-test")
    monkeypatch.chdir(tmp_path)
    server.chat = lambda body: "this is not JSON at all"
    evaluation = ragexp.evaluate(rows(1), overrides=overrides(server, "judge.scorers=[RelevanceToQuery]",
                                                              "max_failed_share=1"), output_dir=tmp_path / "run")
    [question] = evaluation.result.questions
    assert question.status == "failed" and question.failure.startswith("MLflow scorer relevance_to_query")


@pytest.mark.parametrize("scorers, message", [
    ("[NoSuchScorer]", "judge.scorers[0]: 'NoSuchScorer' is not an MLflow scorer; built-in ones: "),
    ("[RetrievalGroundedness]", "judge.scorers[0]: MLflow's retrieval_groundedness reads a trace"),
    ("[Guidelines]", "judge.scorers[0]: MLflow's Guidelines cannot be made with defaults"),
    ("[{name: x, prompt: y}]", "judge.scorers[0]: {'name': 'x', 'prompt': 'y'}: give a built-in"),
    ("[Safety,Safety]", "judge.scorers: two scorers are named 'safety'"),
    ("['mlflow.genai.scorers.ragas:NoSuchMetric']", "judge.scorers[0]: 'mlflow.genai.scorers.ragas:NoSuchMetric' "
                                                    "cannot be imported"),
])
def test_bad_scorers_are_one_line_before_any_request(server, tmp_path, monkeypatch, scorers, message):
    import ragexp

    monkeypatch.setenv(TEST_KEY_ENV, "sk-test")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RagexpError) as raised:
        ragexp.evaluate(rows(1), overrides=overrides(server, f"judge.scorers={scorers}"), output_dir=tmp_path / "run")
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert server.chat_requests() == []


def test_a_dry_run_is_refused_since_mlflow_sends_the_requests(server, tmp_path, monkeypatch):
    import ragexp

    monkeypatch.setenv(TEST_KEY_ENV, "sk-test")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RagexpError, match="dry_run: judge 'mlflow-gpt-4o-mini' sends its requests through MLflow"):
        ragexp.evaluate(rows(1), overrides=overrides(server, "dry_run=true"), output_dir=tmp_path / "run")


def test_a_judge_mlflow_run_is_calibrated_on_its_scorers_metrics(server, tmp_path, monkeypatch):
    """calibrate reads the scorers' metrics (0-1) from the run's settings: people's labels compared
    with them, and a label off 0-1 refused."""
    import ragexp
    from ragexp.calibrate.__main__ import main as calibrate

    monkeypatch.setenv(TEST_KEY_ENV, "sk-test")
    monkeypatch.chdir(tmp_path)
    server.chat = verdicts
    ragexp.evaluate(rows(), overrides=overrides(server, "judge.scorers=[RelevanceToQuery,Correctness]",
                                                f"cache.dir={tmp_path / 'cache'}"), output_dir=tmp_path / "run")
    people = {"port-0": 0, "port-1": 1, "port-2": 1, "port-3": 1}  # the judge said 0, 1, 0, 1
    labels = tmp_path / "labels.csv"
    labels.write_text("question_id,correctness\n" + "".join(f"{q},{v}\n" for q, v in people.items()))
    assert calibrate([str(tmp_path / "run"), "--labels", str(labels), "--out", str(tmp_path / "c"), "--resamples", "20"]) == 0
    [row] = json.loads((tmp_path / "c" / "calibration.json").read_text())["metrics"]
    assert row["metric"] == "correctness" and row["scale"] == "0-1" and row["questions"] == 4
    assert row["mae"] == pytest.approx(0.25)  # one of four disagrees
    labels.write_text("question_id,correctness\nport-0,7\n")
    assert calibrate([str(tmp_path / "run"), "--labels", str(labels), "--out", str(tmp_path / "d")]) == 2
