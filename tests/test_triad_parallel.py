"""The triad's schedule against the real local server: one question's independent requests in
flight together, verification only after the claims' reply, the context once per request, and
the same requests, judgement and counters as the steps one after another."""
import json
import threading
import time

import pytest

from openai_server import numbered, prompt_text, task, user_text
from ragexp.base.concurrency import concurrency, map_concurrently
from ragexp.errors import QuestionFailed
from ragexp.judges.triad import ClaimsFirst
from ragexp.types import Answer, Chunk, Hit, Question
from conftest import compose
from ragexp.config.build import from_yaml

HITS = (
    Hit(Chunk("a#0", "a", "The Quarry server listens on port 7400 by default. It was written in Go."), 0.9, 1),
    Hit(Chunk("b#0", "b", "Bananas are rich in potassium. The Eiffel Tower is in Paris."), 0.5, 2),
)
QUESTION = Question("q1", "Which port does the Quarry server listen on?", ("Port 7400.",), {"a": 1})
ANSWER = Answer("Quarry listens on port 7400 [Doc 1]. It is written in Rust.")
COUNTERS = ("llm_requests", "llm_failures", "judge_reasks", "judge_unreadable_replies", "judge_clamped_values",
            "judge_input_tokens", "judge_output_tokens")


def triad(server, tmp_path, parallel=True, **endpoint):
    """A triad judge from conf/judge/triad.yaml on the test server, with a session (and cache) of its own."""
    from ragexp.config.build import build

    judge = build(compose("judge=triad").judge)
    judge.parallel = parallel
    judge.endpoint = from_yaml("endpoint/openai", base_url=server.base_url, model="gpt-4o-mini", api_key_env=None, backoff_s=0.01, **endpoint)
    llm = from_yaml("llm/default", cache_dir=str(tmp_path / ("parallel" if parallel else "sequential")))
    llm.connect(judge=judge)
    return judge, llm


def scripted(body):
    """Replies that depend only on the request: out-of-range numbers, a clamped score, and an
    unreadable first answer-relevance reply (re-asked)."""
    kind, messages = task(body), body["messages"]
    if kind == "context_relevance":
        return json.dumps({"relevant": [1, 1, 9]})
    if kind == "claims":
        rust = "Rust" in user_text(body)
        return json.dumps({"claims": ["Quarry listens on port 7400."] + ["Quarry is written in Rust."] * rust})
    if kind == "verification":
        return json.dumps({"verdicts": [{"claim": n, "supported": n == 1, "reason": f"r{n}"} for n in numbered(user_text(body))]
                          + [{"claim": 7, "supported": True}]})
    if len(messages) == 2 and "Rust" in user_text(body):
        return '{"score": '  # cut short: asked once more
    return json.dumps({"score": 7, "reasoning": "clamped to 5"})


def counters(llm) -> dict:
    stats = llm.stats()
    return {name: stats[name] for name in COUNTERS}


def bodies(server) -> list[str]:
    return sorted(json.dumps(r["body"], sort_keys=True) for r in server.chat_requests())


def test_three_independent_requests_fly_together_and_verification_follows_the_claims_reply(server, tmp_path):
    arrived_before_claims_reply = []

    def chat(body):  # called when the server replies, after every request that arrived so far was recorded
        if task(body) == "claims":
            arrived_before_claims_reply.append(len(server.requests))
        return scripted(body)

    server.chat, server.gather = chat, 3  # the first requests wait until 3 are in flight
    judge, _ = triad(server, tmp_path)
    judge.judge(QUESTION, HITS, Answer("Quarry listens on port 7400 [Doc 1]."))
    kinds = [task(r["body"]) for r in server.chat_requests()]
    assert sorted(kinds[:3]) == ["answer_relevance", "claims", "context_relevance"]
    assert kinds[3:] == ["verification"]
    assert server.max_in_flight == 3  # together, and never verification beside all three
    assert kinds.index("verification") >= arrived_before_claims_reply[0]


@pytest.mark.parametrize("hits, answer", [
    (HITS, ANSWER),                                # two claims (one unsupported), re-asked answer relevance
    (HITS, Answer("Port 7400 [Doc 1].")),          # one claim
    ((), ANSWER),                                  # nothing retrieved: no context relevance, no verification
    (HITS, Answer("")),                            # no answer: no claims
])
def test_parallel_schedule_sends_the_sequential_requests_and_gives_its_judgement(server, tmp_path, hits, answer):
    server.chat = scripted
    sequential, llm = triad(server, tmp_path, parallel=False)
    expected = sequential.judge(QUESTION, hits, answer)
    expected_requests, expected_counters = bodies(server), counters(llm)
    order = [task(r["body"]) for r in server.chat_requests()]
    assert order == sorted(order, key=["context_relevance", "claims", "verification", "answer_relevance"].index)

    server.requests = []
    judge, llm = triad(server, tmp_path)
    assert judge.judge(QUESTION, hits, answer) == expected
    assert bodies(server) == expected_requests
    assert counters(llm) == expected_counters


def test_the_judgement_is_the_one_the_scripted_replies_give(server, tmp_path):
    server.chat = scripted
    judge, llm = triad(server, tmp_path)
    j = judge.judge(QUESTION, HITS, ANSWER)
    assert j.scores == {"context_relevance": 0.25, "faithfulness": 0.5, "answer_relevance": 1.0,
                        "claim_hallucination_rate": 0.5} and j.hallucination is True
    assert [v["reason"] for v in j.details["claim_verdicts"]] == ["r1", "r2"]
    # out of range: sentence 9, verdict on claim 7, score 7 -> 5; one re-ask of answer relevance
    assert llm.stats()["judge_clamped_values"] == 3 and llm.stats()["judge_reasks"] == 1
    assert len(server.chat_requests()) == 5


def test_each_request_carries_the_context_once(server, tmp_path):
    server.chat = scripted
    judge, _ = triad(server, tmp_path)
    judge.judge(QUESTION, HITS, Answer("Port 7400 [Doc 1]."))
    seen = {task(r["body"]): [prompt_text(r["body"]).count(s) for s in ("port 7400 by default", "rich in potassium")]
            for r in server.chat_requests()}
    assert seen == {"context_relevance": [1, 1], "verification": [1, 1], "claims": [0, 0], "answer_relevance": [0, 0]}


def test_a_failed_concurrent_request_fails_the_question_with_its_reason_once(server, tmp_path):
    server.chat = lambda body: {"status": 500} if task(body) == "claims" else scripted(body)
    sequential, reference = triad(server, tmp_path, parallel=False, max_retries=0)
    with pytest.raises(QuestionFailed) as expected:
        sequential.judge(QUESTION, HITS, ANSWER)
    assert [task(r["body"]) for r in server.chat_requests()] == ["context_relevance", "claims"]

    server.requests = []
    judge, llm = triad(server, tmp_path, max_retries=0)
    with pytest.raises(QuestionFailed, match="judge: HTTP 500") as failed:
        judge.judge(QUESTION, HITS, ANSWER)
    assert str(failed.value) == str(expected.value)
    assert sorted(task(r["body"]) for r in server.chat_requests()) == ["answer_relevance", "answer_relevance",
                                                                       "claims", "context_relevance"]
    stats = llm.stats()
    assert stats["llm_failures"] == 1
    # counted as the steps' order counts them: context relevance's out-of-range sentence, not the later score
    assert stats["judge_clamped_values"] == reference.stats()["judge_clamped_values"] == 1


def test_of_several_failures_the_first_step_in_order_gives_the_reason(server, tmp_path):
    server.chat = lambda body: {"answer_relevance": {"status": 502}, "context_relevance": {"status": 503}}.get(
        task(body)) or scripted(body)
    judge, llm = triad(server, tmp_path, max_retries=0)
    with pytest.raises(QuestionFailed, match="HTTP 503"):
        judge.judge(QUESTION, HITS, ANSWER)
    assert llm.stats()["llm_failures"] == 2 and llm.stats()["judge_clamped_values"] == 0


def test_questions_fewer_than_the_slots_fill_them_and_the_slots_bound_the_requests(server, tmp_path):
    """The pipeline hands the judge as many questions as the endpoint has slots; at the end of a
    run, when fewer questions are left, their independent requests still fill the slots."""
    server.chat, server.gather = scripted, 4  # the first requests wait until 4 are in flight
    judge, llm = triad(server, tmp_path, max_concurrency=4)
    assert concurrency(judge) == 4
    questions = [Question(f"q{n}", f"Which port does server {n} use?", ("7400",)) for n in range(2)]
    judged = map_concurrently(lambda q: judge.judge(q, HITS, ANSWER), questions, concurrency(judge), "judging")
    assert [j.scores["faithfulness"] for j in judged] == [0.5, 0.5]
    stats = llm.stats()  # the two verification requests are alike: the second may come from the cache
    assert server.max_in_flight == 4 and stats["llm_requests"] + stats["llm_cache_hits"] == 2 * 5


def test_a_step_whose_reply_stays_unreadable_fails_only_its_metrics(server, tmp_path):
    """The reply policy of every LLM judge: re-asked once, then its metrics fail for the question
    with the reason (counted, never scored); the other steps' scores stand."""
    server.chat = lambda body: "no verdict here" if task(body) == "answer_relevance" else scripted(body)
    for parallel in (False, True):
        judge, llm = triad(server, tmp_path / str(parallel), parallel=parallel)
        j = judge.judge(QUESTION, HITS, ANSWER)
        assert set(j.scores) == {"context_relevance", "faithfulness", "claim_hallucination_rate"}
        assert j.details["failed_criteria"] == {
            "answer_relevance": "unreadable reply after a re-ask: no JSON object in the reply ('no verdict here')"}
        assert j.hallucination is True and llm.stats()["judge_failed_criteria"] == 1
    server.chat = lambda body: "no verdict anywhere"
    judge, _ = triad(server, tmp_path / "none")
    with pytest.raises(QuestionFailed, match="unreadable reply after a re-ask"):
        judge.judge(QUESTION, HITS, ANSWER)


def test_a_questions_claims_request_is_made_before_its_other_requests(server, tmp_path):
    """The claims start the longer chain (claims, then verification): the other two steps wait until
    it is made, so that of the questions judged at once the claims requests go out first."""
    server.chat = scripted
    judge, _ = triad(server, tmp_path)
    judge.claims_first.wait_s = 30.0  # only the claims' going releases the others here
    made, step = [], judge.step
    judge.step = lambda name, *args, **values: made.append(name) or step(name, *args, **values)
    judge.judge(QUESTION, HITS, ANSWER)
    # the claims first; the two it released and the verification its reply starts, in whatever order their threads run
    assert made[0] == "claims" and sorted(made[1:4]) == ["answer_relevance", "context_relevance", "verification"]
    order, released, after_claims = judge.claims_first, [], judge.claims_first.after_claims
    order.after_claims = lambda: (after_claims(), released.append(order.coming_claims <= 0))
    judge.judge(QUESTION, HITS, Answer(""))  # no claims to make: the others are released, not held until wait_s
    assert sorted(made[4:]) == ["answer_relevance", "context_relevance"] and released == [True, True]


def test_claims_first_holds_the_other_steps_until_every_coming_claims_request_goes():
    order, released = ClaimsFirst(wait_s=30.0), []
    order.coming(), order.coming()
    waiter = threading.Thread(target=lambda: (order.after_claims(), released.append(order.coming_claims)))
    waiter.start()
    order.going()
    assert waiter.is_alive() and not released  # one claims request is still to go
    order.going()
    waiter.join()
    assert released == [0]  # released by the last claims request going, not by wait_s


@pytest.mark.process  # timing is its subject: the bound of the wait
def test_a_claims_request_that_never_goes_holds_the_others_for_wait_s_only():
    bounded = ClaimsFirst(wait_s=0.05)
    bounded.coming()
    started = time.monotonic()
    bounded.after_claims()
    assert 0.04 <= time.monotonic() - started < 2

