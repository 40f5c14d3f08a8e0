"""The judge's request path against the real local server: the reply read from the protocol's
JSON as it is (no SDK models), the response cache opened before the first request, requests
leaving as soon as their own question's prompt is built, each stage's CPU time, and the test
server's count of requests in flight (what `python bench/run.py judges` reports)."""
import pytest

from conftest import HASH, compose
from openai_server import OpenAIServer, judge_json
from ragexp.errors import QuestionFailed
from ragexp.judges.llm import LLMJudge
from ragexp.llm.client import ChatClient, ChatRequest
from ragexp.llm.usage import Prices, Usage
from ragexp.config.build import from_yaml


def client(server, usage):
    endpoint = from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env=None, backoff_s=0.01, max_retries=1)
    return ChatClient(endpoint, "judge", "no-key", usage, Prices({}))


def completion(message, usage=None) -> dict:
    body = {"id": "c1", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}
    return {"body": {**body, "usage": usage} if usage is not None else body}


ASK = ChatRequest((("user", "hello"),))


@pytest.mark.parametrize("usage, tokens", [
    ({"prompt_tokens": 12, "completion_tokens": 3}, (12, 3)),
    ({"prompt_tokens": 12.0, "completion_tokens": 3.0}, (12, 3)),
    (None, (0, 0)),  # no usage: the reply still counts, its tokens are 0
    ({"prompt_tokens": "many", "completion_tokens": -2}, (0, 0)),
    ({"prompt_tokens": float("inf"), "completion_tokens": True}, (0, 0)),  # Infinity: Python's JSON reads it
])
def test_text_and_tokens_are_read_from_the_reply_json(server, usage, tokens):
    server.chat = lambda body: completion({"role": "assistant", "content": "fine"}, usage)
    counts = Usage()
    reply = client(server, counts).complete(ASK)
    assert (reply.text, reply.input_tokens, reply.output_tokens) == ("fine", *tokens)
    assert counts.stats()["judge_input_tokens"] == tokens[0] and counts.stats()["llm_failures"] == 0


def test_a_null_content_is_an_empty_reply(server):
    server.chat = lambda body: completion({"role": "assistant", "content": None})
    assert client(server, Usage()).complete(ASK).text == ""


@pytest.mark.parametrize("body", [
    {"id": "c1", "object": "chat.completion", "choices": []},
    {"id": "c1", "object": "chat.completion"},
    {"id": "c1", "choices": [{"index": 0, "message": {"role": "assistant", "content": ["not", "text"]}}]},
    ["a", "list"],
])
def test_a_json_reply_that_is_no_chat_completion_fails_its_question_once(server, body):
    server.chat = lambda _: {"body": body}
    counts = Usage()
    with pytest.raises(QuestionFailed, match="sent no chat completion"):
        client(server, counts).complete(ASK)
    assert len(server.chat_requests()) == 1 and counts.stats()["llm_failures"] == 1  # not retried


def test_the_request_body_is_the_protocols_and_nothing_else(server):
    client(server, Usage()).complete(ChatRequest((("system", "s"), ("user", "u")), 0.0, 77, "on"))
    [sent] = server.chat_requests()
    assert sent["body"] == {"model": "m", "temperature": 0.0, "max_tokens": 77, "response_format": {"type": "json_object"},
                            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}


def test_the_response_cache_is_open_when_the_session_connects_before_any_request(server, tmp_path):
    judge = from_yaml("judge/llm", endpoint=from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env=None), system_prompt="system {question}", user_prompt="user {context}", reask_prompt="{problem}")
    session = from_yaml("llm/default", cache_dir=str(tmp_path / "llm"))
    session.connect(judge=judge)
    assert (tmp_path / "llm" / "responses.sqlite").is_file() and server.requests == []
    assert session.cache() is judge.client.cache and len(judge.client.cache) == 0
    session.close()


def test_requests_leave_as_their_own_prompt_is_built_not_after_all_prompts(server, tmp_path, monkeypatch):
    """At concurrency 2, when the first request reaches the server no reply has left it yet, so no
    worker can have built more than one prompt: at most 2 of the 40 questions' prompts exist."""
    built, seen = [], []
    plan_once = LLMJudge.plan_once
    monkeypatch.setattr(LLMJudge, "plan_once", lambda self, *a: built.append(1) or plan_once(self, *a))

    def reply(body):
        seen.append(len(built))
        return judge_json()

    server.chat = reply
    from ragexp.run.pipeline import run

    result = run(compose(*HASH, "retriever=bm25", "judge=llm", f"judge.endpoint.base_url={server.base_url}",
                         "judge.endpoint.api_key_env=null", "judge.endpoint.max_concurrency=2", "tracker=none",
                         f"cache.dir={tmp_path / 'cache'}"))
    assert len(built) == len(seen) == result.aggregates["total_questions"] == 40
    assert seen[0] <= 2 and result.aggregates["failed_questions"] == 0
    # each stage's CPU time (all threads) beside its wall time
    assert {"judging", "judging_cpu", "generation_cpu"} <= set(result.timings)
    assert 0 < result.timings["judging_cpu"]


def test_mean_in_flight_is_the_served_time_over_the_span_from_first_arrival_to_last_reply():
    server = OpenAIServer()
    try:
        assert server.mean_in_flight() == 0.0
        server.requests = [{"path": "/v1/chat/completions", "time": 10.0, "done": 11.0},
                           {"path": "/v1/chat/completions", "time": 10.5, "done": 11.5},
                           {"path": "/v1/chat/completions", "time": 11.5, "done": 12.0},
                           {"path": "/v1/embeddings", "time": 0.0, "done": 20.0},  # not a chat request
                           {"path": "/v1/chat/completions", "time": 12.0}]  # not answered yet
        assert server.mean_in_flight() == pytest.approx((1.0 + 1.0 + 0.5) / 2.0)
    finally:
        server.httpd.server_close()


@pytest.mark.process  # timing is its subject: requests held in flight together (the server's latency, its 10 s gathering)
def test_every_answered_request_is_stamped_and_gathered_requests_are_in_flight_together(tmp_path):
    with OpenAIServer(latency=0.05) as server:
        server.gather, server.chat = 3, lambda body: judge_json()
        judge = from_yaml("judge/llm", endpoint=from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env=None, max_concurrency=3), system_prompt="system {question}", user_prompt="user {context}", reask_prompt="{problem}")
        session = from_yaml("llm/default", cache_dir=None)
        session.connect(judge=judge)
        from ragexp.base.concurrency import map_concurrently
        from ragexp.types import Answer, Question

        questions = [Question(f"q{n}", f"question {n}?", ("yes",), {}) for n in range(6)]
        map_concurrently(lambda q: judge.judge(q, (), Answer("yes")), questions, judge.concurrency, "judging")
        requests = server.replied()
        assert len(requests) == 6 and all(r["done"] >= r["time"] for r in requests)
        assert server.max_in_flight == 3 and server.mean_in_flight() > 0
