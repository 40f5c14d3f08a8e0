"""The LLM synth generator against the real local server (tests/openai_server.py) with scripted
replies: every question type, each quality rule firing, dedupe, the grounding verdict, the budget
stop and a re-run answered from the request cache."""
import json
import re

from conftest import CONF, quality_rules
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from openai_server import prompt_text

from ragexp.config.build import build
from ragexp.synth import TYPES
from ragexp.synth.build import generate
from ragexp.synth.sources import SourcePlan
from ragexp.types import Chunk, Document
from ragexp.config.build import from_yaml

ROLE = "synth.generator"
SENTENCES = {
    "alpha": "Alpha servers listen on port 7400 by default.",
    "beta": "Beta queues retain finished jobs for fourteen days.",
    "gamma": "Gamma workers renew their lease every thirty seconds.",
    "delta": "Delta backups are written as compressed archives nightly.",
    "copy": "Copied questions repeat this exact sentence about COPY markers.",
    "long": "Long answers ramble about LONG markers without end.",
    "invent": "Invented answers ignore the INVENT marker text entirely.",
    "garbage": "Garbage replies come back for GARBAGE markers always.",
    "dup1": "Duplicate questions arise from DUP markers in reports.",
    "dup2": "Duplicate questions arise again from DUP markers elsewhere.",
    "ungrounded": "Ungrounded answers are flagged by the UNGROUNDED verdict.",
    "fail": "Failing requests answer FAIL500 with a server error.",
}


def corpus(names):
    documents = [Document(n, SENTENCES[n], n) for n in names]
    chunks = [Chunk(f"{d.doc_id}#0", d.doc_id, d.text, 0, len(d.text)) for d in documents]
    return documents, chunks


def passages(text: str) -> list[str]:
    return [p.strip() for p in re.findall(r"\[Passage \d+\] \([^)]*\)\n(.*?)(?=\n\n\[Passage|\Z)", text, re.S)]


def scripted(body: dict):
    """Replies from the passages: markers in a passage decide what goes wrong."""
    text = prompt_text(body)
    if "Check a question-answer pair" in text:
        return json.dumps({"grounded": "UNGROUNDED" not in text, "reason": "scripted verdict"})
    found = passages(text)
    first = found[0]
    if "FAIL500" in first:
        return {"status": 500}
    if "GARBAGE" in first:
        return "I would rather not answer in JSON."
    type_ = next(t for t in TYPES if f"Write a {t.replace('_', '-')}" in text or (t == "multi_hop" and "two passages" in text))
    words = first.rstrip(".").split()
    question = f"For the {type_} check, what holds for {' '.join(words[:2]).lower()} here?"
    answer, evidence = first, [first]
    if "COPY" in first:
        question = first.rstrip(".") + "?"
    if "DUP" in first:
        question = "Where do duplicate questions arise from markers?"
    if "LONG" in first:
        answer = " ".join([first] * 12)
    if "INVENT" in first:
        answer = "Zebras juggle marmalade under violet moons."
    if type_ == "multi_hop":
        answer = " ".join(found)
        evidence = [first] if any("ONESIDED" in p for p in found) else found
    return json.dumps({"question": question, "answer": answer, "evidence": evidence})


def generator_from_yaml(server, max_concurrency: int = 4):
    """The LLM generator as conf/synth/generator/llm.yaml builds it, pointed at the test server."""
    endpoint = {"base_url": server.base_url, "model": "synth-model", "api_key_env": "null", "backoff_s": 0.01,
                "max_retries": 0, "max_concurrency": max_concurrency}
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hydra_compose(config_name="synth", overrides=["synth/generator=llm", *(
            f"synth.generator.endpoint.{k}={v}" for k, v in endpoint.items())])
    return build(cfg.synth.generator)


def run(server, tmp_path, names, mix, size, session=None, **kwargs):
    server.chat = scripted
    generator = generator_from_yaml(server, max_concurrency=kwargs.pop("concurrency", 4))
    session = session or from_yaml("llm/default", cache_dir=str(tmp_path / "llm"))
    session.connect(**{ROLE: generator})
    documents, chunks = corpus(names)
    plan = SourcePlan(chunks, documents, seed=0, embedder=from_yaml("embedder/hash"))
    try:
        result = generate(generator, quality_rules(), plan, from_yaml("embedder/hash"), size, mix, seed=0,
                          max_attempts=kwargs.pop("max_attempts", 1), max_per_document=kwargs.pop("max_per_document", 10))
    finally:
        session.close()
    return result, session


def test_every_rule_fires_once_and_clean_candidates_are_kept(server, tmp_path):
    names = list(SENTENCES)
    result, session = run(server, tmp_path, names, {"factual": 1.0}, size=len(names))
    reasons = result.rejected_by_reason()
    assert reasons == {"copied_sentence": 1, "length": 1, "low_overlap": 1, "unparsable": 1, "near_duplicate": 1,
                       "ungrounded": 1, "request_failed": 1}
    kept_docs = sorted(c.source.doc_ids[0] for c in result.kept)
    assert kept_docs == sorted(["alpha", "beta", "gamma", "delta", next(d for d in ("dup1", "dup2")
                                                                          if d in kept_docs)])
    for candidate in result.kept:
        assert candidate.generator == "synth-model" and len(candidate.prompt_hash) == 12
        assert candidate.answer == SENTENCES[candidate.source.doc_ids[0]]
    # the garbage reply was asked once more (a re-ask) before it was rejected
    assert session.usage.counts[ROLE, "reasks"] == 1 and session.usage.counts[ROLE, "unreadable_replies"] == 1
    # a verdict was asked only for candidates that passed the offline rules: 5 kept + 1 ungrounded
    verdicts = [r for r in server.chat_requests() if "Check a question-answer pair" in prompt_text(r["body"])]
    assert len(verdicts) == 6


def test_every_type_is_generated_with_its_prompt(server, tmp_path):
    names = ["alpha", "beta", "gamma", "delta"]
    mix = {t: 1 for t in TYPES}
    result, _ = run(server, tmp_path, names, mix, size=5, max_attempts=2)
    assert sorted(c.source.type for c in result.kept) == sorted(TYPES)
    [multi] = [c for c in result.kept if c.source.type == "multi_hop"]
    assert len(set(multi.source.doc_ids)) == 2 and len(multi.evidence) == 2
    hashes = {c.source.type: c.prompt_hash for c in result.kept}
    assert len(set(hashes.values())) == len(TYPES)  # each type's prompt has its own hash


def test_a_multi_hop_answer_from_one_passage_is_rejected(server, tmp_path):
    SENTENCES["onesided"] = "Onesided evidence quotes ONESIDED passages only."
    try:
        names = ["onesided", "alpha"]
        result, _ = run(server, tmp_path, names, {"multi_hop": 1.0}, size=1)
    finally:
        del SENTENCES["onesided"]
    assert result.rejected_by_reason() == {"single_source": 1} and not result.kept
    assert {c.doc_id for c in result.rejections[0].source.chunks} == {"onesided", "alpha"}


def test_budget_stops_generation_and_says_so(server, tmp_path):
    session = from_yaml("llm/default", cache_dir=str(tmp_path / "llm"), budget_usd=0.0001, prices={"synth-model": {"input": 1000.0, "output": 1000.0}})
    names = ["alpha", "beta", "gamma", "delta"]
    result, session = run(server, tmp_path, names, {"factual": 1.0}, size=4, session=session, concurrency=1)
    assert "budget_usd=0.0001 spent" in result.stopped
    assert len(server.chat_requests()) == 1  # the first request spent the budget; none after it
    assert session.usage.spent_usd > 0.0001
    assert result.rejected_by_reason()["budget"] >= 1 and not result.kept


def test_second_run_is_answered_from_the_request_cache(server, tmp_path):
    names = ["alpha", "beta", "gamma", "delta", "copy"]
    first, _ = run(server, tmp_path, names, {"factual": 0.5, "procedural": 0.5}, size=6, max_attempts=2)
    sent = len(server.chat_requests())
    assert sent > 0
    again, session = run(server, tmp_path, names, {"factual": 0.5, "procedural": 0.5}, size=6, max_attempts=2)
    assert len(server.chat_requests()) == sent  # nothing new sent
    assert session.usage.counts["requests"] == 0 and session.usage.counts["cache_hits"] == sent
    assert [c.question for c in again.kept] == [c.question for c in first.kept]
    assert again.rejected_by_reason() == first.rejected_by_reason()
