"""judge=cascade: the cheap judge on every question, the LLM judge (the real local OpenAI-protocol
server, scripted) on a sample drawn where the cheap judge is unsure; the run's means are the
prediction-powered estimates, recomputed here from the per-question table."""
import json

import numpy as np
import pytest

from openai_server import judge_json, user_text
from conftest import HASH, TEST_KEY_ENV, run_app

ENV = {TEST_KEY_ENV: "k"}


def cascade_args(server, *extra: str) -> list[str]:
    return ["judge=cascade", "retriever=bm25", *HASH, "tracker=none", "dataset.limit=20",
            f"judge.expensive.endpoint.base_url={server.base_url}", f"judge.expensive.endpoint.api_key_env={TEST_KEY_ENV}",
            "judge.expensive.endpoint.backoff_s=0.01", *extra]


def scripted(body) -> str:
    """The LLM judge's verdict, a function of the question's prompt (so the same on every run)."""
    faithfulness = 1 + len(user_text(body)) % 10
    return judge_json(8, 7, faithfulness, faithfulness < 4)


def table_of(folder) -> list[dict]:
    [path] = list(folder.rglob("questions.json"))
    data = json.loads(path.read_text())
    return [dict(zip(data["columns"], row)) for row in data["data"]]


def results_of(folder) -> dict:
    [path] = list(folder.rglob("results.json"))
    [values] = json.loads(path.read_text()).values()
    return values


def test_the_means_are_the_cheap_ones_corrected_on_the_drawn_questions(server, tmp_path):
    server.chat = scripted
    done = run_app(*cascade_args(server, "judge.sample=0.3", "judge.tune=false"), cwd=tmp_path, env=ENV)
    assert done.returncode == 0, done.stderr
    rows, aggregates = table_of(tmp_path), results_of(tmp_path)
    drawn = [r for r in rows if r["judged_by"] == "cheap+expensive"]
    assert 1 <= len(drawn) <= 20 and len(server.chat_requests()) == len(drawn)  # the LLM judged the drawn ones only
    assert all(0.5 * 0.3 - 1e-9 <= r["inclusion_probability"] <= 1 for r in rows)  # the floor: half the uniform chance
    assert sum(r["inclusion_probability"] for r in rows) == pytest.approx(0.3 * 20)
    for metric in ("faithfulness", "context_relevance", "answer_similarity"):
        f = np.array([r[f"{metric}_cheap"] for r in rows])
        weights = [1 / r["inclusion_probability"] for r in drawn]
        correction = [(r[f"{metric}_expensive"] - r[f"{metric}_cheap"]) / r["inclusion_probability"] for r in drawn]
        # the plain prediction-powered estimate: the cheap mean + the weighted mean of the drawn corrections
        assert aggregates[f"avg_{metric}"] == pytest.approx(f.mean() + sum(correction) / sum(weights), abs=1e-3), metric
        assert aggregates[f"avg_{metric}_cheap"] == pytest.approx(f.mean(), abs=1e-3)
        assert aggregates[f"n_{metric}_expensive"] == len(drawn)
    assert "judge=cascade: offline-hash judged 20 questions, llm-gpt-4o-mini" in done.stdout

    again = run_app(*cascade_args(server, "judge.sample=0.3", "judge.tune=false", "hydra.run.dir=again"),
                    cwd=tmp_path, env=ENV)
    assert again.returncode == 0
    assert len(server.chat_requests()) == len(drawn)  # the same questions drawn, their judgements from the cache
    assert [r["judged_by"] for r in table_of(tmp_path / "again")] == [r["judged_by"] for r in rows]


def test_the_draw_is_shared_across_configurations_and_a_larger_sample_pays_only_for_new_ones(server, tmp_path):
    server.chat = scripted
    assert run_app(*cascade_args(server, "judge.sample=0.2"), cwd=tmp_path, env=ENV).returncode == 0
    small = {r["question_id"] for r in table_of(tmp_path) if r["judged_by"] == "cheap+expensive"}
    asked = len(server.chat_requests())
    done = run_app(*cascade_args(server, "judge.sample=0.5", "hydra.run.dir=larger"), cwd=tmp_path, env=ENV)
    assert done.returncode == 0
    large = {r["question_id"] for r in table_of(tmp_path / "larger") if r["judged_by"] == "cheap+expensive"}
    assert small <= large  # one uniform number per question: a larger sample keeps the smaller one's questions
    assert len(server.chat_requests()) - asked == len(large - small)


@pytest.mark.parametrize("override, message", [
    ("judge.sample=0", "judge.sample"),
    ("judge.sample=500", "judge.sample: 500 is not a share below 1 nor a count of at most the 20 questions"),
    ("judge@judge.expensive=offline", "judge.expensive: it is the same judge as judge.cheap"),
    ("judge@judge.expensive=triad", "judge.expensive: context_relevance is on (0.0, 1.0) for"),
])
def test_bad_cascades_are_one_line_and_exit_2(server, tmp_path, override, message):
    args = cascade_args(server, override)
    if override.endswith("=offline"):  # a judge without an endpoint to point at the server
        args = [a for a in args if not a.startswith("judge.expensive.endpoint.")]
    done = run_app(*args, cwd=tmp_path, env=ENV)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert server.chat_requests() == []


def test_a_dry_run_counts_the_expensive_judgements_of_the_sample_only(server, tmp_path):
    done = run_app(*cascade_args(server, "judge.sample=0.25", "dry_run=true"), cwd=tmp_path, env=ENV)
    assert done.returncode == 0, done.stderr
    assert "judge           5 requests" in done.stdout  # 25% of 20 questions
    assert server.chat_requests() == []


def test_too_few_expensive_judgements_leave_the_cheap_means_and_say_so(server, tmp_path):
    server.chat = lambda body: {"status": 500}  # every expensive judgement fails
    done = run_app(*cascade_args(server, "judge.sample=0.3", "judge.expensive.endpoint.max_retries=0"), cwd=tmp_path, env=ENV)
    assert done.returncode == 0, done.stderr
    aggregates = results_of(tmp_path)
    assert aggregates["avg_faithfulness"] == aggregates["avg_faithfulness_cheap"]  # never a mean of zeros
    assert "too few to correct with" in done.stdout and "expensive judgements failed" in done.stdout
