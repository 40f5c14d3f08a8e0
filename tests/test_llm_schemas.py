"""Every LLM path asks for its reply with a JSON schema, and judges read token log-probabilities:
against the local OpenAI-protocol server, a request's `response_format` is a schema that the
replies the readers take fit, and where a reply carries log-probabilities a judge's score is the
probability-weighted mean of its scale (a yes/no verdict its probability), the written value kept
beside it. Request keys cover the schema and the log-probability setting."""
import json

import jsonschema
import pytest

from conftest import compose
from openai_server import auto_reply, char_logprobs, judge_json, task
from ragexp.llm.client import ChatRequest, Reply, request_key, stored_request
from ragexp.config.build import from_yaml
from ragexp.llm.logprobs import distribution, scale_texts, value_offsets
from ragexp.types import Answer, Chunk, Hit, Question

HITS = (Hit(Chunk("a#0", "a", "The Quarry server listens on port 7400 by default. It was written in Go."), 0.9, 1),)
QUESTION = Question("q1", "Which port does the Quarry server listen on?", ("Port 7400.",), {"a": 1})
ANSWER = Answer("Quarry listens on port 7400 [Doc 1].")


def approx(expected):
    """Log-probabilities are kept to 4 decimals: probabilities read back within 0.1%."""
    return pytest.approx(expected, rel=1e-3)


def build(group: str, option: str, **overrides):
    from ragexp.config.build import build as built

    return built(getattr(compose(f"{group}={option}"), group), **overrides)


def connected(component, server, tmp_path, role: str = "judge"):
    component.endpoint = from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env=None, backoff_s=0.01)
    session = from_yaml("llm/default", cache_dir=str(tmp_path / "cache"))
    session.connect(**{role: component})
    return component, session


def reply_of(text: str, alternatives: dict[int, dict[str, float]]) -> Reply:
    """A reply written a character a token, with `alternatives` at those offsets."""
    from ragexp.llm.client import reply_logprobs, token_logprobs

    content = char_logprobs(text, alternatives)
    return Reply(text, logprobs=token_logprobs(reply_logprobs({"choices": [{"logprobs": {"content": content}}]})))


def at(text: str, key: str, after: int = 0) -> int:
    """Where the value of `key` starts in `text` (the offset a score's alternatives are given at)."""
    return dict(value_offsets(text))[key] + after


def test_a_scale_value_is_the_probability_weighted_mean_of_what_its_alternatives_spell():
    text = '{"faithfulness": 7, "reasoning": "ok"}'
    reply = reply_of(text, {at(text, "faithfulness"): {"7": 0.6, "8": 0.3, '"': 0.1}})  # a quote spells no number
    found = distribution(reply.logprobs, text, at(text, "faithfulness"), scale_texts(1, 10))
    assert found == approx({7.0: 0.6 / 0.9, 8.0: 0.3 / 0.9})


def test_a_token_that_starts_two_values_is_followed_when_written_and_left_out_when_not():
    text = '{"score": 1}'
    start = at(text, "score")
    written_one = reply_of(text, {start: {"1": 0.5, "9": 0.5}, start + 1: {"}": 0.6, "0": 0.4}})
    assert distribution(written_one.logprobs, text, start, scale_texts(1, 10)) == approx(
        {9.0: 0.5, 1.0: 0.3, 10.0: 0.2})  # "1" then "0" is 10, "1" then "}" is 1
    text = '{"score": 9}'
    written_nine = reply_of(text, {start: {"9": 0.5, "1": 0.5}})
    assert distribution(written_nine.logprobs, text, start, scale_texts(1, 10)) == {9.0: 1.0}  # 1 or 10: unknown


def test_no_distribution_from_tokens_that_do_not_spell_the_reply_or_without_log_probabilities():
    text = '{"score": 3}'
    reply = reply_of(text, {})
    assert distribution(reply.logprobs, text + " ", at(text, "score"), scale_texts(1, 5)) is None
    assert distribution((), text, at(text, "score"), scale_texts(1, 5)) is None


def test_a_reply_whose_code_fence_the_server_stripped_is_read_where_it_stands_in_the_tokens():
    from ragexp.llm.client import at_values, reply_logprobs, token_logprobs

    text = '{"score": 4}'
    fenced = f"```json\n{text}\n```"  # what the model wrote; llama.cpp's server sends `text`
    written = char_logprobs(fenced, {fenced.index("4"): {"4": 0.5, "2": 0.5}})
    tokens = token_logprobs(at_values(reply_logprobs({"choices": [{"logprobs": {"content": written}}]}), text))
    assert distribution(tokens, text, at(text, "score"), scale_texts(1, 5)) == approx({4.0: 0.5, 2.0: 0.5})
    assert sum(bool(t[3]) for t in tokens) <= 5  # alternatives kept only at the value and the tokens after it


def test_value_offsets_skip_keys_inside_strings():
    text = '{"reasoning": "a \\"faithfulness\\": 9 quote", "faithfulness": 4}'
    assert [key for key, _ in value_offsets(text)] == ["reasoning", "faithfulness"]
    assert text[dict(value_offsets(text))["faithfulness"]] == "4"


def test_request_keys_cover_the_schema_and_the_log_probability_setting():
    endpoint = from_yaml("endpoint/openai", base_url="http://127.0.0.1:9/v1", model="m")
    plain = ChatRequest((("user", "u"),), json_mode="auto")
    assert "top_logprobs" not in stored_request(endpoint, plain)  # keys of requests without it are as before
    keys = {request_key(endpoint, r) for r in (plain, ChatRequest(plain.messages, json_mode="auto", schema='{"type": "object"}'),
                                               ChatRequest(plain.messages, json_mode="auto", top_logprobs=20),
                                               ChatRequest(plain.messages, json_mode="auto", top_logprobs=5))}
    assert len(keys) == 4


def test_logprobs_auto_asks_a_local_endpoint_and_not_a_remote_one():
    judge = build("judge", "llm")
    judge.endpoint = from_yaml("endpoint/openai", base_url="http://127.0.0.1:9/v1", model="m")
    [remote] = judge.planned_requests(QUESTION, HITS, ANSWER)
    judge.endpoint = from_yaml("endpoint/local", base_url="http://127.0.0.1:9/v1", model="m", model_path=None, threads=1, context_size=512, parallel=1, gpu_layers=0)
    [local] = judge.planned_requests(QUESTION, HITS, ANSWER)
    assert remote.top_logprobs == 0 and local.top_logprobs == 20
    judge.logprobs = False
    assert judge.planned_requests(QUESTION, HITS, ANSWER)[0].top_logprobs == 0


def judged_with_logprobs(server, tmp_path):
    text = judge_json(8, 7, 9, False, "grounded")
    spots = {at(text, "context_relevance"): {"8": 0.5, "9": 0.5},
             at(text, "answer_similarity"): {"7": 1.0},
             at(text, "faithfulness"): {"9": 0.8, "6": 0.2},
             at(text, "hallucination"): {"false": 0.75, "true": 0.25}}
    server.chat = lambda body: {"content": text, "logprobs": char_logprobs(text, spots)}
    judge, session = connected(build("judge", "llm", logprobs=True), server, tmp_path)
    return judge, session


def test_the_llm_judge_scores_the_weighted_mean_and_keeps_the_written_values(server, tmp_path):
    judge, _ = judged_with_logprobs(server, tmp_path)
    j = judge.judge(QUESTION, HITS, ANSWER)
    assert j.scores == {"context_relevance": 8.5, "answer_similarity": 7.0, "faithfulness": approx(8.4)}
    assert j.hallucination == approx(0.25)
    assert j.details["sampled"] == {"context_relevance": 8, "answer_similarity": 7, "faithfulness": 9, "hallucination": False}
    [sent] = server.chat_requests()
    assert sent["body"]["logprobs"] is True and sent["body"]["top_logprobs"] == 20
    assert sent["body"]["response_format"]["type"] == "json_schema"
    again = build("judge", "llm", logprobs=True)  # a new run: from the response cache, log-probabilities kept
    again.endpoint = judge.endpoint
    from_yaml("llm/default", cache_dir=str(tmp_path / "cache")).connect(judge=again)
    assert again.judge(QUESTION, HITS, ANSWER) == j and len(server.chat_requests()) == 1


def test_without_log_probabilities_the_written_values_are_the_scores(server, tmp_path):
    server.chat = lambda body: judge_json(8, 7, 9, True)
    judge, _ = connected(build("judge", "llm", logprobs=True), server, tmp_path)
    j = judge.judge(QUESTION, HITS, ANSWER)
    assert j.scores == {"context_relevance": 8, "answer_similarity": 7, "faithfulness": 9} and j.hallucination is True
    assert "sampled" not in j.details


def test_an_endpoint_that_rejects_log_probabilities_is_asked_without_them(server, tmp_path, caplog):
    server.chat = lambda body: {"status": 400} if "logprobs" in body else judge_json(8, 7, 9)
    judge, _ = connected(build("judge", "llm", logprobs=True), server, tmp_path)
    assert judge.judge(QUESTION, HITS, ANSWER).scores["faithfulness"] == 9
    assert ["logprobs" in r["body"] for r in server.chat_requests()] == [True, False]
    assert "rejected logprobs" in caplog.text


def test_the_triads_faithfulness_is_the_mean_probability_of_support(server, tmp_path):
    verdicts = json.dumps({"verdicts": [{"claim": 1, "supported": True, "reason": "stated"}]})
    relevance = json.dumps({"score": 4, "reasoning": "addresses it"})

    def chat(body):
        kind = task(body)
        if kind == "verification":
            return {"content": verdicts, "logprobs": char_logprobs(verdicts, {at(verdicts, "supported"): {"true": 0.7, "false": 0.3}})}
        if kind == "answer_relevance":
            return {"content": relevance, "logprobs": char_logprobs(relevance, {at(relevance, "score"): {"4": 0.5, "5": 0.5}})}
        return auto_reply(body)

    server.chat = chat
    judge, _ = connected(build("judge", "triad", logprobs=True), server, tmp_path)
    j = judge.judge(QUESTION, HITS, ANSWER)
    assert j.scores["faithfulness"] == approx(0.7) and j.scores["claim_hallucination_rate"] == approx(0.3)
    assert j.scores["answer_relevance"] == approx((4.5 - 1) / 4) and j.hallucination is False
    assert j.details["sampled"] == {"faithfulness": 1.0, "claim_hallucination_rate": 0.0, "answer_relevance": 0.75}
    assert j.details["claim_verdicts"][0]["p_supported"] == approx(0.7)


def test_a_rubric_level_is_weighted_by_its_value(server, tmp_path):
    from ragexp.judges.rubric import Rubric, RubricJudge

    rubric = Rubric({"grounded": {"instructions": "Grounded.", "scale": ["no", "partly", "fully"]}}, mode="single_call", name=None,
                    logprobs=True)
    text = '{"grounded": {"reasoning": "all of it", "score": "fully"}}'
    start = at(text, "score")
    server.chat = lambda body: {"content": text, "logprobs": char_logprobs(text, {start + 1: {"f": 0.5, "p": 0.5}})}
    judge = RubricJudge(rubric, from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env=None), repeats=1, name=None)
    from_yaml("llm/default", cache_dir=None).connect(judge=judge)
    j = judge.judge(QUESTION, HITS, ANSWER)
    assert j.scores == {"grounded": approx(2.5)} and j.details["sampled"] == {"grounded": 3.0}


def schemas_and_replies(server, tmp_path) -> list[tuple[str, dict, str]]:
    """(path, the schema sent, the scripted reply the path read) of every LLM path's requests."""
    from ragexp.synth.candidates import Source

    server.chat = auto_reply
    judge, _ = connected(build("judge", "llm"), server, tmp_path)
    judge.judge(QUESTION, HITS, ANSWER)
    triad, _ = connected(build("judge", "triad"), server, tmp_path)
    triad.judge(QUESTION, HITS, ANSWER)
    rubric, _ = connected(build("judge", "rubric"), server, tmp_path)
    rubric.judge(QUESTION, HITS, ANSWER)
    for mode in ("listwise", "pointwise"):
        reranker, _ = connected(build("reranker", "llm", mode=mode), server, tmp_path, "reranker")
        reranker.rerank(QUESTION, list(HITS) * 2)
    synth = synth_generator()
    connected(synth, server, tmp_path, "generator")
    synth.verify(synth.make(Source("factual", (HITS[0].chunk,))))
    sent = []
    for r in server.replied():
        form = r["body"].get("response_format", {})
        assert form.get("type") == "json_schema", (task(r["body"]), form)
        sent.append((task(r["body"]), form["json_schema"]["schema"], auto_reply(r["body"])))
    return sent


def synth_generator():
    """synth/generator=llm with its YAML settings."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from conftest import CONF
    from ragexp.config.build import build as built

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hydra_compose(config_name="synth", overrides=["synth/generator=llm"])
    return built(cfg.synth.generator)


def test_every_llm_path_asks_with_a_schema_its_readers_replies_fit(server, tmp_path):
    sent = schemas_and_replies(server, tmp_path)
    assert {kind for kind, _, _ in sent} == {"judge", "context_relevance", "claims", "verification", "answer_relevance",
                                             "rubric", "rerank_list", "rerank_point", "synth_question", "synth_verdict"}
    for _, schema, reply in sent:
        jsonschema.validate(json.loads(reply), schema)  # the reply each reader takes fits the schema it sent
    bad = json.loads(judge_json(faithfulness=11))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, next(s for k, s, _ in sent if k == "judge"))
