"""LLM generation and judging end to end: the real CLI (`python -m ragexp`, run in this process)
against the real OpenAI-protocol server on 127.0.0.1 (started here), through the real openai client."""
import json
import shutil
from pathlib import Path

import pytest

from conftest import TEST_KEY_ENV, llm_args, mlflow_runs, run_app
from openai_server import auto_reply, judge_json, numbered, task, user_text

SAMPLE = Path(__file__).resolve().parents[1] / "ragexp" / "datasets" / "sample" / "questions.jsonl"
QUESTIONS = [json.loads(line)["question"] for line in SAMPLE.read_text().splitlines()[:8]]
KEY = "sk-canary-7f3a9c1e-do-not-leak"
ENV = {TEST_KEY_ENV: KEY}


def question_of(body) -> int:
    """Which sample question (0-based) a request is about."""
    text = user_text(body)
    return next(i for i, q in enumerate(QUESTIONS) if q in text)


def results_of(cwd: Path) -> dict:
    [results] = json.loads(max(cwd.glob("outputs/*/*/results.json")).read_text()).values()
    return results


def test_llm_judge_scores_what_the_server_scripted(server, tmp_path):
    """Plain, fenced, prose-wrapped, out-of-range, once-malformed and never-complete replies; two
    transient faults; fixed token usage. Scores, aggregates, counts and cost are checked."""
    scripted = {
        0: judge_json(8, 6, 10, False, "plain"),
        1: "```json\n" + judge_json(6, 4, 8, True, "fenced") + "\n```",
        2: "Here is my evaluation:\n" + judge_json(9, 9, 9, False, "prose") + "\nLet me know if you need more.",
        3: judge_json(12, 7, 0, False, "out of range"),
    }

    def chat(body):
        if task(body) == "generate":
            return {"content": auto_reply(body), "usage": (50, 10)}
        q, reasked = question_of(body), len(body["messages"]) > 2
        if q == 4:  # malformed, then fine when asked again
            content = judge_json(5, 5, 5, False, "second try") if reasked else '{"context_relevance": 5, "answer_'
        elif q == 5:  # a field missing every time
            content = '{"context_relevance": 5, "answer_similarity": 5, "hallucination": false, "reasoning": "no f"}'
        else:
            content = scripted[q]
        return {"content": content, "usage": (100, 20)}

    server.chat = chat
    server.faults = [500, {"status": 429, "retry_after": "0"}]
    proc = run_app(*llm_args(server), "dataset.limit=6", "tracker=none", cwd=tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "scores by judge 'llm-gpt-4o-mini'" in proc.stdout
    r = results_of(tmp_path)
    assert r["judge"] == "llm-gpt-4o-mini"
    # question 5 never gives faithfulness: its other scores are kept, faithfulness fails for it alone
    assert r["total_questions"] == 6 and r["failed_questions"] == 0
    assert r["avg_context_relevance"] == pytest.approx((8 + 6 + 9 + 10 + 5 + 5) / 6, abs=1e-4)
    assert r["avg_answer_similarity"] == pytest.approx((6 + 4 + 9 + 7 + 5 + 5) / 6, abs=1e-4)
    assert r["avg_faithfulness"] == pytest.approx((10 + 8 + 9 + 1 + 5) / 5) and r["n_faithfulness"] == 5
    assert r["hallucination_rate"] == pytest.approx(1 / 6, abs=1e-4)
    # overall_score over the five questions with every input: as before
    assert r["overall_score"] == pytest.approx((7.6 * 0.3 + 6.2 * 0.4 + 6.6 * 0.3) * 0.8, abs=1e-4)
    assert r["judge_clamped_values"] == 2 and r["judge_reasks"] == 2 and r["judge_unreadable_replies"] == 1
    assert r["judge_failed_criteria"] == 1
    assert ("metric failed, left out of its mean (1): faithfulness: unreadable reply after a re-ask: "
            "missing field 'faithfulness'") in proc.stdout
    # 6 generations, 6 judgements + 2 re-asks; the two faults were retried
    assert r["llm_requests"] == 14 and r["llm_retries"] == 2 and r["llm_failures"] == 0
    assert len(server.chat_requests()) == 16
    assert (r["generator_input_tokens"], r["generator_output_tokens"]) == (300, 60)
    assert (r["judge_input_tokens"], r["judge_output_tokens"]) == (800, 160)
    assert r["judge_cost_usd"] == pytest.approx((800 * 0.15 + 160 * 0.60) / 1e6)
    assert r["generator_cost_usd"] == pytest.approx((300 * 0.15 + 60 * 0.60) / 1e6)


def test_a_cached_rerun_and_a_weights_sweep_make_no_request(server, tmp_path):
    args = [*llm_args(server), "dataset.limit=4", "tracker=none"]
    first = run_app(*args, cwd=tmp_path, env=ENV)
    assert first.returncode == 0, first.stderr
    sent = len(server.chat_requests())
    assert sent == 8 and results_of(tmp_path)["llm_requests"] == 8

    again = run_app(*args, "hydra.run.dir=again", cwd=tmp_path, env=ENV)
    assert again.returncode == 0, again.stderr
    assert len(server.chat_requests()) == sent
    assert "answers_cached=4" in again.stdout and "judgements_cached=4" in again.stdout  # the stage cache
    [rerun] = json.loads((tmp_path / "again" / "results.json").read_text()).values()
    assert rerun["llm_requests"] == 0 and rerun["judge_cost_usd"] == 0
    assert rerun["overall_score"] == results_of(tmp_path)["overall_score"]

    for stage in ("answers", "judgements"):  # without the stage cache, the request cache answers
        shutil.rmtree(tmp_path / ".ragexp-cache" / stage)
    third = run_app(*args, "hydra.run.dir=third", cwd=tmp_path, env=ENV)
    assert third.returncode == 0, third.stderr
    assert len(server.chat_requests()) == sent
    [rerun] = json.loads((tmp_path / "third" / "results.json").read_text()).values()
    assert rerun["llm_requests"] == 0 and rerun["llm_cache_hits"] == 8 and rerun["judge_cost_usd"] == 0
    assert rerun["overall_score"] == results_of(tmp_path)["overall_score"]

    sweep = run_app("-m", *args, "weights.hallucination_penalty=true,false", cwd=tmp_path, env=ENV)
    assert sweep.returncode == 0, sweep.stderr
    assert len(server.chat_requests()) == sent
    merged = json.loads(next(tmp_path.glob("multirun/*/*/results.json")).read_text())
    assert {r["llm_requests"] for r in merged.values()} == {0} and len(merged) == 2


def test_requests_overlap_up_to_max_concurrency(server, tmp_path):
    server.gather = 4  # the first four requests are answered once all four are in flight
    proc = run_app(*llm_args(server), "dataset.limit=8", "tracker=none", "judge.endpoint.max_concurrency=4",
                   "generator.endpoint.max_concurrency=4", cwd=tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert len(server.chat_requests()) == 16 and server.max_in_flight == 4


def test_the_api_key_is_used_but_never_logged_or_stored(server, tmp_path):
    proc = run_app(*llm_args(server), "dataset.limit=2", "run_name=keyed", cwd=tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert {r["auth"] for r in server.chat_requests()} == {f"Bearer {KEY}"}
    client, [run] = mlflow_runs(tmp_path)
    assert run.data.params["judge.endpoint.api_key_env"] == TEST_KEY_ENV
    assert not [k for k, v in run.data.params.items() if KEY in v]
    downloaded = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path / "artifacts")))
    assert {"config.yaml", "questions.json", "results.json"} <= {p.name for p in downloaded.rglob("*")}
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.match("outputs/*/*/.hydra/config.yaml") for p in files) and any(p.name == "mlflow.db" for p in files)
    assert any(p.name.endswith(".log") for p in files) and any(p.name == "responses.sqlite" for p in files)
    leaks = [p for p in files if KEY.encode() in p.read_bytes()]
    assert leaks == [] and KEY not in proc.stdout + proc.stderr


@pytest.mark.parametrize("setting,value,message", [
    ("judge.endpoint.api_key_env", "RAGEXP_NO_SUCH_KEY_VAR",
     "ragexp: error: judge.endpoint.api_key_env: environment variable 'RAGEXP_NO_SUCH_KEY_VAR' is not set"),
    ("generator.endpoint.base_url", "http://127.0.0.1:9/v1",
     "ragexp: error: generator.endpoint.base_url: cannot reach http://127.0.0.1:9/v1"),
])
def test_a_missing_key_or_unreachable_endpoint_stops_before_any_work(server, tmp_path, setting, value, message):
    proc = run_app(*llm_args(server), f"{setting}={value}", "tracker=none", cwd=tmp_path, env=ENV)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "chunks" not in proc.stdout + proc.stderr  # no chunking, nothing retrieved
    assert server.requests == [] and not list(tmp_path.glob("outputs/*/*/results.json"))


def test_dry_run_counts_and_prices_the_requests_and_makes_none(server, tmp_path):
    # input free, output $1 per token: the estimate is the max_tokens of every request, in dollars;
    # no key is needed to estimate
    proc = run_app(*llm_args(server, judge="triad"), "dataset.limit=5", "dry_run=true", "budget_usd=100",
                   "llm.prices.gpt-4o-mini.input=0", "llm.prices.gpt-4o-mini.output=1000000", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "no LLM request made; 5 questions would need" in out
    assert "generator       5 requests to gpt-4o-mini" in out and "<= $1500.0000" in out  # 5 x 300 tokens
    assert "judge          20 requests to gpt-4o-mini" in out and "<= $10000.0000" in out  # 4 per question x 500
    assert "total          25 requests, estimated cost <= $11500.0000" in out
    assert "budget_usd=100: the estimate is above it" in out
    assert server.requests == []
    assert not list(tmp_path.glob("outputs/*/*/results.json")) and not (tmp_path / "mlflow.db").exists()


def test_budget_fails_the_remaining_questions(server, tmp_path):
    def chat(body):  # each judge request costs $0.01 at the price below
        return {"content": auto_reply(body), "usage": (1000, 0) if task(body) == "judge" else (10, 1)}

    server.chat = chat
    args = llm_args(server, model="free-model")  # not in the price table: generation costs 0
    args = [a.replace("judge.endpoint.model=free-model", "judge.endpoint.model=judge-model") for a in args]
    proc = run_app(*args, "+llm.prices.judge-model={input:10,output:0}", "budget_usd=0.025",
                   "judge.endpoint.max_concurrency=1", "dataset.limit=5", "tracker=none", cwd=tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr
    r = results_of(tmp_path)
    assert r["failed_questions"] == 2 and r["judge_cost_usd"] == pytest.approx(0.03)
    assert "failed (2): budget: budget_usd=0.025 spent" in proc.stdout
    assert sum(task(q["body"]) == "judge" for q in server.chat_requests()) == 3


def test_triad_claims_and_verdicts_go_into_the_table(server, tmp_path):
    seen_sentences = {}

    def chat(body):
        kind = task(body)
        if kind == "context_relevance":
            seen_sentences[question_of(body)] = len(numbered(user_text(body)))
            return json.dumps({"relevant": [1, 2]})
        if kind == "claims":
            return json.dumps({"claims": [f"claim {n} of question {question_of(body)}" for n in (1, 2, 3)]})
        if kind == "verification":
            return "```json\n" + json.dumps({"verdicts": [{"claim": n, "supported": n != 2, "reason": f"r{n}"}
                                                          for n in (1, 2, 3)]}) + "\n```"
        return auto_reply(body) if kind == "generate" else json.dumps({"score": 5, "reasoning": "complete"})

    server.chat = chat
    proc = run_app(*llm_args(server, judge="triad"), "dataset.limit=3", cwd=tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert len(server.chat_requests()) == 3 + 3 * 4  # generation + 4 triad requests per question
    client, [run] = mlflow_runs(tmp_path)
    m = run.data.metrics
    shares = [2 / seen_sentences[q] for q in range(3)]
    assert m["avg_context_relevance"] == pytest.approx(sum(shares) / 3, abs=1e-4)
    assert m["avg_faithfulness"] == pytest.approx(2 / 3, abs=1e-4)
    # one claim in three unsupported in every answer: every question holds a hallucination
    assert m["avg_claim_hallucination_rate"] == pytest.approx(1 / 3, abs=1e-4) and m["hallucination_rate"] == 1.0
    assert m["avg_answer_relevance"] == 1.0
    assert m["overall_score"] == pytest.approx(0.25 * sum(shares) / 3 + 0.5 * 2 / 3 + 0.25, abs=1e-4)
    assert run.data.tags["judge"] == "triad-gpt-4o-mini"
    table = client.load_table(run.info.experiment_id, "questions.json", run_ids=[run.info.run_id])
    row = table.set_index("question_id").loc["q002"]
    assert json.loads(row["claims"]) == [f"claim {n} of question 1" for n in (1, 2, 3)]
    verdicts = json.loads(row["claim_verdicts"])
    assert [(v["claim"], v["supported"], v["reason"]) for v in verdicts] == [
        ("claim 1 of question 1", True, "r1"), ("claim 2 of question 1", False, "r2"), ("claim 3 of question 1", True, "r3")]
    assert row["faithfulness"] == pytest.approx(2 / 3, abs=1e-4) and row["context_sentences"] == seen_sentences[1]
    assert "2 of 3 claims supported (unsupported: claim 2 of question 1)" in row["reasoning"]
