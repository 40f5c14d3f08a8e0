"""Reading judge replies, and the LLM judges and generator against the real local server: what
the server scripts is what they score; clamping, re-asks and failures are counted."""
import json

import pytest

from openai_server import judge_json, numbered, task, user_text
from ragexp.errors import QuestionFailed, RagexpError
from ragexp.components.generators import OpenAIGenerator
from ragexp.judges.llm import LLMJudge
from ragexp.llm.prompts import Template
from ragexp.llm.replies import Unreadable, json_objects, read_reply
from ragexp.metrics.scoring import Weights, aggregate
from ragexp.types import Answer, Chunk, Hit, Question, QuestionResult
from conftest import compose
from ragexp.config.build import from_yaml

HITS = (
    Hit(Chunk("a#0", "a", "The Quarry server listens on port 7400 by default. It was written in Go."), 0.9, 1),
    Hit(Chunk("b#0", "b", "Bananas are rich in potassium. The Eiffel Tower is in Paris."), 0.5, 2),
)
QUESTION = Question("q1", "Which port does the Quarry server listen on?", ("Port 7400.",), {"a": 1})
ANSWER = Answer("Quarry listens on port 7400 [Doc 1]. It is written in Rust.")


def connected(component, server, tmp_path, **session):
    """The component from its YAML defaults, pointed at the test server and connected."""
    component.endpoint = from_yaml("endpoint/openai", base_url=server.base_url, model="gpt-4o-mini", api_key_env=None, backoff_s=0.01)
    llm = from_yaml("llm/default", cache_dir=str(tmp_path / "cache"), **session)
    llm.connect(judge=component)
    return component, llm


@pytest.mark.parametrize("reply", [
    '{"a": 1}',
    'Sure! Here is my verdict:\n```json\n{"a": 1}\n```\nHope that helps.',
    'The scores are {"a": 1} as requested {not json}',
])
def test_json_is_found_in_fences_and_prose(reply):
    assert read_reply(reply, lambda obj: obj["a"]) == 1


def test_unreadable_replies_say_why():
    with pytest.raises(Unreadable, match="no JSON object"):
        read_reply("I think it is good.", dict)
    with pytest.raises(Unreadable, match="no JSON object"):
        read_reply('{"context_relevance": 8, "faithfulness": }', dict)  # malformed
    # a trailing comma is forgiven, outside strings only
    assert read_reply('{"faithfulness": 9, "reasoning": "a, }",}', dict) == {"faithfulness": 9, "reasoning": "a, }"}
    with pytest.raises(Unreadable, match="missing field 'faithfulness'"):
        read_reply('{"context_relevance": 8, "answer_similarity": 7, "hallucination": false, "reasoning": "x"}', LLMJudge.read)
    assert json_objects('{"outer": {"inner": 1}} and {"second": 2}') == [{"outer": {"inner": 1}}, {"second": 2}]


def test_single_call_judge_scores_what_the_server_says_clamping_out_of_range(server, tmp_path):
    server.chat = lambda body: judge_json(12, "7", 0, True, "invented Rust")
    judge, llm = connected(from_yaml("judge/llm"), server, tmp_path)
    j = judge.judge(QUESTION, HITS, ANSWER)
    assert j.judge == "llm-gpt-4o-mini"
    assert j.scores == {"context_relevance": 10, "answer_similarity": 7, "faithfulness": 1}
    assert j.hallucination is True and j.reasoning == "invented Rust"
    assert j.details["clamped"] == ["context_relevance: 12 -> 10", "faithfulness: 0 -> 1"]
    assert llm.stats()["judge_clamped_values"] == 2
    [sent] = server.chat_requests()
    prompt = user_text(sent["body"])
    assert QUESTION.text in prompt and "Port 7400." in prompt and ANSWER.text in prompt
    assert '<document n="1" id="a">\nThe Quarry server listens' in prompt and '<document n="2" id="b">' in prompt
    assert sent["body"]["temperature"] == 0 and sent["body"]["max_tokens"] == 500
    form = sent["body"]["response_format"]  # the reply's JSON schema: an endpoint that takes one holds it to 1-10
    assert form["type"] == "json_schema" and form["json_schema"]["schema"]["properties"]["faithfulness"] == {
        "type": "integer", "minimum": 1, "maximum": 10}


def test_unreadable_reply_is_asked_once_more_then_fails_the_question(server, tmp_path):
    replies = iter(['{"context_relevance": 8, "answer_similarity": ', judge_json(5, 6, 7)])
    server.chat = lambda body: next(replies)
    judge, llm = connected(from_yaml("judge/llm"), server, tmp_path)
    assert judge.judge(QUESTION, HITS, ANSWER).scores == {"context_relevance": 5, "answer_similarity": 6, "faithfulness": 7}
    reask = server.chat_requests()[1]["body"]["messages"]
    assert [m["role"] for m in reask] == ["system", "user", "assistant", "user"]
    assert "no JSON object" in reask[-1]["content"]

    # still missing fields after the re-ask: the metric it gives is kept, each other fails with the reason
    server.chat = lambda body: '{"context_relevance": 8}'
    partial = judge.judge(QUESTION, HITS, Answer("another answer"))
    assert partial.scores == {"context_relevance": 8} and partial.hallucination is None
    assert partial.details["failed_criteria"] == {
        m: f"unreadable reply after a re-ask: missing field {m!r}" for m in ("answer_similarity", "faithfulness", "hallucination")}
    assert len(server.chat_requests()) == 4
    server.chat = lambda body: "no JSON at all"  # nothing to keep: the question fails
    with pytest.raises(QuestionFailed, match="judge: unreadable reply after a re-ask: no JSON object"):
        judge.judge(QUESTION, HITS, Answer("a third answer"))
    stats = llm.stats()
    assert stats["judge_reasks"] == 3 and stats["judge_unreadable_replies"] == 2 and stats["judge_failed_criteria"] == 3


def test_triad_counts_sentences_claims_and_verdicts(server, tmp_path):
    def chat(body):
        kind = task(body)
        if kind == "context_relevance":
            assert numbered(user_text(body)) == [1, 2, 3, 4]  # the context's four sentences
            return json.dumps({"relevant": [1, 1, 9]})  # a duplicate, and one out of range
        if kind == "claims":
            return json.dumps({"claims": ["Quarry listens on port 7400.", "Quarry is written in Rust."]})
        if kind == "verification":
            assert numbered(user_text(body)) == [1, 2]
            return json.dumps({"verdicts": [{"claim": 2, "supported": "NOT_SUPPORTED", "reason": "Go, not Rust"},
                                            {"claim": 1, "supported": True}]})
        return json.dumps({"score": 4, "reasoning": "answers the port"})

    server.chat = chat
    judge, llm = connected(from_yaml("judge/triad"), server, tmp_path)
    j = judge.judge(QUESTION, HITS, ANSWER)
    assert j.judge == "triad-gpt-4o-mini"
    assert j.scores == {"context_relevance": 0.25, "faithfulness": 0.5, "answer_relevance": 0.75,
                        "claim_hallucination_rate": 0.5}
    assert j.hallucination is True  # one meaning for every judge: this answer holds a hallucination
    assert j.details["relevant_sentences"] == ["The Quarry server listens on port 7400 by default."]
    assert j.details["claims"] == ["Quarry listens on port 7400.", "Quarry is written in Rust."]
    assert [v["supported"] for v in j.details["claim_verdicts"]] == [True, False]
    assert j.details["claim_verdicts"][1]["reason"] == "Go, not Rust"
    assert "1 of 2 claims supported (unsupported: Quarry is written in Rust.)" in j.reasoning
    assert len(server.chat_requests()) == 4 and llm.stats()["judge_clamped_values"] == 1
    # an answer without claims: faithful by definition, no verification request
    server.chat = lambda body: json.dumps({"claims": []} if task(body) == "claims" else
                                          {"relevant": []} if task(body) == "context_relevance" else
                                          {"score": 1, "reasoning": "does not answer"})
    j = judge.judge(Question("q2", "Who wrote Quarry?", ("The Quarry team.",)), HITS, Answer("I don't know."))
    assert j.scores == {"context_relevance": 0.0, "faithfulness": 1.0, "answer_relevance": 0.0,
                        "claim_hallucination_rate": 0.0} and j.hallucination is False
    assert len(server.chat_requests()) == 7


def test_repeats_are_separate_requests_and_their_spread_is_reported(server, tmp_path):
    calls = {}

    def chat(body):  # the n-th identical request gets faithfulness 6, 8, 10
        n = calls[user_text(body)] = calls.get(user_text(body), 0) + 1
        return judge_json(8, 7, 4 + 2 * n, hallucination=n == 1)

    server.chat = chat
    judge, llm = connected(from_yaml("judge/llm", repeats=3), server, tmp_path)
    results = [QuestionResult(QUESTION, HITS, ANSWER, judge.judge(QUESTION, HITS, ANSWER)),
               QuestionResult(QUESTION, HITS, Answer("x"), judge.judge(QUESTION, HITS, Answer("x")))]
    assert len(server.chat_requests()) == 6
    j = results[0].judgement
    assert j.scores["faithfulness"] == 8 and [r.scores["faithfulness"] for r in j.repeats] == [6, 8, 10]
    assert j.hallucination == pytest.approx(1 / 3)
    agg = aggregate(results, Weights(context_relevance=0.3, answer_similarity=0.4, faithfulness=0.3, hallucination_penalty=True))
    assert agg["avg_faithfulness"] == 8 and agg["avg_faithfulness_std"] == 2.0
    assert agg["avg_context_relevance_std"] == 0 and agg["hallucination_rate"] == pytest.approx(1 / 3, abs=1e-4)
    per_repeat = [(2.4 + 2.8 + 0.3 * f) * (1 - h) for f, h in ((6, 1), (8, 0), (10, 0))]
    assert agg["overall_score"] == pytest.approx(sum(per_repeat) / 3, abs=1e-4)
    # the same judging again comes from the cache, repeat by repeat
    again = judge.judge(QUESTION, HITS, ANSWER)
    assert [r.scores["faithfulness"] for r in again.repeats] == [6, 8, 10] and len(server.chat_requests()) == 6


def test_generator_asks_for_citations_from_numbered_chunks(server, tmp_path):
    generator = instantiate_generator()
    generator.endpoint = from_yaml("endpoint/openai", base_url=server.base_url, model="gpt-4o-mini", api_key_env=None)
    from_yaml("llm/default", cache_dir=None).connect(generator=generator)
    answer = generator.generate(QUESTION.text, HITS)
    assert answer.text == "The documents say so [Doc 1]."
    [sent] = server.chat_requests()
    system, user = (m["content"] for m in sent["body"]["messages"])
    assert "[Doc N]" in system and "I don't know" in system
    assert '<document n="1" id="a">' in user and QUESTION.text in user
    assert sent["body"]["temperature"] == 0 and "response_format" not in sent["body"]
    server.chat = lambda body: "   "
    with pytest.raises(QuestionFailed, match="empty answer"):
        generator.generate("another question", HITS)


def instantiate_generator() -> OpenAIGenerator:
    from ragexp.config.build import build

    return build(compose("generator=openai").generator)


def test_prompt_templates_allow_only_their_fields():
    assert Template("Q: {question} {{literal}}", ("question",), "judge.user_prompt").render(question="why?") == "Q: why? {literal}"
    for bad, shown in (("{question.__class__}", "{question.__class__}"), ("{answer}", "{answer}"), ("{0}", "{0}"),
                       ("{question!r}", "{question!r}")):
        with pytest.raises(RagexpError, match=r"judge.user_prompt: unknown field " + shown.replace("{", r"\{").replace("}", r"\}")):
            Template(bad, ("question",), "judge.user_prompt")
    from ragexp.validation import problems

    assert problems(compose("judge=llm", "judge.repeats=0")) == ["judge.repeats: must be >= 1, got 0"]
    assert problems(compose("judge=triad", "weights=triad", "~judge.prompts.claims.user")) == [
        "judge.prompts.claims: needs a system and a user template"]
