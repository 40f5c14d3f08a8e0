"""The chat client against a real OpenAI-protocol server on 127.0.0.1, through the real openai
client: retries and their counts, Retry-After, timeouts, fatal errors, the JSON-format fallback,
the rate limit, the cache, the budget, and the concurrency limit."""
import threading

import pytest

from conftest import cli_env
from ragexp.errors import BudgetExhausted, QuestionFailed, RagexpError
from ragexp.llm.cache import ResponseCache
from ragexp.llm.client import ChatClient, ChatRequest, request_key, reserve_turn
from ragexp.llm.endpoint import Endpoint
from ragexp.llm.usage import Prices, Usage
from ragexp.config.build import from_yaml

PRICES = Prices({"m": {"input": 1.0, "output": 10.0}})  # dollars per million tokens


def client(server, usage=None, cache=None, **endpoint):
    settings = {"api_key_env": None, "backoff_s": 0.01, "timeout_s": 5, **endpoint}
    return ChatClient(from_yaml("endpoint/openai", base_url=server.base_url, model="m", **settings), "judge", "sk-test", usage or Usage(), PRICES, cache)


def ask(text="hello", **kw):
    return ChatRequest((("system", "be brief"), ("user", text)), **kw)


def test_reply_tokens_and_cost_come_from_usage(server):
    server.chat = lambda body: {"content": "hi there", "usage": (1000, 200)}
    usage = Usage()
    reply = client(server, usage).complete(ask(temperature=0.0, max_tokens=77, json_mode="on"))
    assert reply.text == "hi there" and (reply.input_tokens, reply.output_tokens) == (1000, 200) and not reply.cached
    [sent] = server.chat_requests()
    body = sent["body"]
    assert body["model"] == "m" and body["temperature"] == 0 and body["max_tokens"] == 77
    assert body["response_format"] == {"type": "json_object"}
    assert body["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    stats = usage.stats()
    assert stats["judge_input_tokens"] == 1000 and stats["judge_output_tokens"] == 200
    assert stats["judge_cost_usd"] == pytest.approx((1000 * 1.0 + 200 * 10.0) / 1e6)
    assert stats["llm_requests"] == 1 and stats["llm_retries"] == 0 and stats["generator_cost_usd"] == 0


@pytest.mark.process  # timing is its subject: a 0.5 s timeout and a 1 s Retry-After
def test_transient_failures_are_retried_and_counted_honouring_retry_after(server):
    server.faults = [{"status": 429, "retry_after": "1"}, 500, 503, "timeout"]
    server.timeout_sleep = 1.5
    usage = Usage()
    reply = client(server, usage, timeout_s=0.5).complete(ask())
    assert reply.text == "The documents say so [Doc 1]."
    times = [r["time"] for r in server.chat_requests()]
    assert len(times) == 5
    assert times[1] - times[0] >= 0.95  # Retry-After: 1, although backoff_s is 0.01
    stats = usage.stats()
    assert stats["llm_requests"] == 1 and stats["llm_retries"] == 4 and stats["llm_failures"] == 0


def test_a_request_that_keeps_failing_fails_its_question_not_the_run(server):
    server.faults = [500, 502, 500]
    usage = Usage()
    with pytest.raises(QuestionFailed, match=r"judge: HTTP 500 .* after 3 attempts"):
        client(server, usage, max_retries=2).complete(ask())
    assert len(server.chat_requests()) == 3
    assert usage.stats()["llm_failures"] == 1 and usage.stats()["llm_retries"] == 2
    server.faults = [400]  # a bad request is not retried
    with pytest.raises(QuestionFailed, match="HTTP 400"):
        client(server, usage).complete(ask())
    assert len(server.chat_requests()) == 4 and usage.stats()["llm_failures"] == 2
    server.faults = ["garbage"]  # a 200 that is not a chat completion
    with pytest.raises(QuestionFailed, match="sent no chat completion"):
        client(server, usage).complete(ask())
    assert usage.stats()["llm_failures"] == 3


@pytest.mark.parametrize("status,setting", [(401, "judge.endpoint.api_key_env"), (404, "judge.endpoint.model")])
def test_a_refused_key_or_unknown_model_stops_the_run(server, status, setting):
    server.faults = [status]
    with pytest.raises(RagexpError, match=setting):
        client(server).complete(ask())
    assert len(server.chat_requests()) == 1


def test_auto_json_mode_falls_back_when_the_endpoint_rejects_it(server):
    server.reject_response_format = True
    c = client(server)
    assert c.complete(ask("one", json_mode="auto")).text
    assert c.complete(ask("two", json_mode="auto")).text
    sent = [r["body"] for r in server.chat_requests()]
    assert ["response_format" in b for b in sent] == [True, False, False]
    with pytest.raises(QuestionFailed, match="HTTP 400"):  # "on" insists
        client(server).complete(ask("three", json_mode="on"))


def test_cache_answers_a_repeated_request_without_http(server, tmp_path):
    usage = Usage()
    cache = ResponseCache(tmp_path / "cache")
    first = client(server, usage, cache).complete(ask())
    again = client(server, usage, ResponseCache(tmp_path / "cache")).complete(ask())
    assert again.cached and again.text == first.text and len(server.chat_requests()) == 1
    # a different repeat, temperature or model is a different request
    client(server, usage, cache).complete(ask(repeat=1))
    client(server, usage, cache).complete(ask(temperature=0.5))
    assert len(server.chat_requests()) == 3
    assert usage.stats()["llm_cache_hits"] == 1 and usage.stats()["llm_requests"] == 3
    other = from_yaml("endpoint/openai", base_url=server.base_url, model="other-model", api_key_env=None)
    assert request_key(other, ask()) != request_key(from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env=None), ask())
    assert "sk-test" not in (tmp_path / "cache" / "responses.sqlite").read_bytes().decode("latin-1")


def test_budget_stops_new_requests_once_spent(server):
    server.chat = lambda body: {"content": "ok", "usage": (10_000, 0)}  # $0.01 per request
    usage = Usage(budget_usd=0.025)
    c = client(server, usage)
    for n in range(3):
        c.complete(ask(f"question {n}"))
    with pytest.raises(BudgetExhausted, match="budget"):
        c.complete(ask("one too many"))
    assert len(server.chat_requests()) == 3 and usage.spent_usd == pytest.approx(0.03)


def test_concurrency_limit_and_requests_per_minute(server, monkeypatch, tmp_path):
    server.gather = 3  # the first three requests are answered once all three are in flight
    c = client(server, max_concurrency=3)
    threads = [threading.Thread(target=c.complete, args=(ask(f"q{n}"),)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert server.max_in_flight == 3
    server.gather, server.requests = 0, []
    reserved = []  # the turns the client took: the schedule it decided

    def spy(key, interval_s):
        reserved.append(reserve_turn(key, interval_s))
        return reserved[-1]

    monkeypatch.setattr("ragexp.llm.client.reserve_turn", spy)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # where reserve_turn keeps the schedule
    c = client(server, requests_per_minute=600)  # one every 0.1 s
    for n in range(4):
        c.complete(ask(f"paced {n}"))
    assert len(reserved) == 4 and all(b - a >= 0.1 - 1e-6 for a, b in zip(reserved, reserved[1:]))
    arrivals = [r["wall"] for r in server.chat_requests()]
    assert len(arrivals) == 4 and all(arrived >= turn for arrived, turn in zip(arrivals, reserved))


def test_requests_per_minute_is_shared_by_processes(tmp_path):
    """Parallel sweep jobs (hydra/launcher=joblib) are processes: they take turns from one schedule.
    Two processes reserve four turns each at one per minute: the eight turns are a minute apart
    (unshared, each process would start its own schedule: two turns at once)."""
    import subprocess
    import sys

    code = ("from ragexp.llm.client import reserve_turn\n"
            "print(' '.join(repr(reserve_turn('one-endpoint', 60.0)) for _ in range(4)))\n")
    env = cli_env({"TMPDIR": str(tmp_path)})  # where reserve_turn keeps the schedule
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    turns = sorted(float(t) for out in outputs for t in out.split())
    assert len(turns) == 8
    assert [b - a for a, b in zip(turns, turns[1:])] == pytest.approx([60.0] * 7, abs=1e-3)


def test_the_cache_is_safe_for_concurrent_processes(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from ragexp.llm.cache import ResponseCache\n"
            "c = ResponseCache(sys.argv[1])\n"
            "for i in range(150):\n"
            "    reply = {'text': str(i), 'input_tokens': i, 'output_tokens': 1}\n"
            "    c.put(f'{sys.argv[2]}-{i}', {'i': i}, reply)\n"
            "    assert c.get(f'{sys.argv[2]}-{i}') == reply\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), tag], env=cli_env()) for tag in "abc"]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    assert len(ResponseCache(tmp_path)) == 450


def test_endpoint_settings_are_checked_and_a_key_is_never_echoed(monkeypatch):
    from conftest import compose
    from ragexp.validation import problems

    assert problems(compose("judge=llm", "judge.endpoint.max_concurrency=0")) == [
        "judge.endpoint.max_concurrency: must be >= 1, got 0"]
    assert Endpoint.constraints("127.0.0.1:8000")[0].startswith("base_url: must be an http(s) URL")
    with pytest.raises(RagexpError, match="must be the name of an environment variable") as err:
        from_yaml("endpoint/openai", base_url="http://x/v1", model="m", api_key_env="sk-live-abc123").api_key("judge.endpoint")
    assert "sk-live-abc123" not in str(err.value)
    monkeypatch.setenv("MY_LLM_KEY", "sk-from-env")
    assert from_yaml("endpoint/openai", base_url="http://x/v1", model="m", api_key_env="MY_LLM_KEY").api_key("judge.endpoint") == "sk-from-env"
