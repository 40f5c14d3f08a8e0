"""ragexp.synth offline: cloze templates, the stratified sampler, quotas, a cloze run on the
sample, the dataset folder read back by dataset=jsonl / synthetic, and dataset=mix's ratio."""
import json
from collections import Counter

import pytest
from conftest import CONF, compose, quality_rules
from hydra import compose as hydra_compose
from hydra import initialize_config_dir

from ragexp.components.chunkers import RecursiveChunker
from ragexp.errors import RagexpError
from ragexp.config.build import build
from ragexp.synth import TYPES
from ragexp.synth.build import generate, quotas
from ragexp.synth.candidates import Candidate, NoCandidate, Source
from ragexp.synth.cloze import ClozeGenerator
from ragexp.synth.output import write_dataset
from ragexp.synth.sources import SourcePlan, stratified
from ragexp.types import Chunk, Document, Hit
from ragexp.config.build import from_yaml


def synth_config(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose(config_name="synth", overrides=list(overrides))


def chunk(text, doc="d", n=0):
    return Chunk(f"{doc}#{n}", doc, text, 0, len(text))


@pytest.mark.parametrize("type_,text,question", [
    ("factual", "Pebble is an embedded key-value store.", "What is Pebble?"),
    ("factual", "The default `base_delay` is 2s.", "What is the default `base_delay`?"),
    ("factual", "QUARRY_ADDR defaults to http://localhost:7420.", "What does QUARRY_ADDR default to?"),
    ("procedural", "To enable clustering, set cluster.enabled to true.", "How do you enable clustering?"),
    ("comparative", "The metrics port changed from 9100 to 9464.", "How did the metrics port change?"),
    ("comparative", "Unlike Redis, Pebble needs no separate server.", "How does Pebble differ from Redis?"),
    ("troubleshooting", "If the lease expires before an ack, the job returns to pending.",
     "What happens if the lease expires before an ack?"),
    ("troubleshooting", "If the connection is refused, check the server log.",
     "What should you do if the connection is refused?"),
    ("troubleshooting", "## Jobs run twice\n\nA lease expired while the handler ran. Raise the timeout.\n",
     'How do you resolve "Jobs run twice"?'),
])
def test_cloze_templates(type_, text, question):
    candidate = ClozeGenerator().make(Source(type_, (chunk(text),)))
    assert candidate.question == question
    assert candidate.answer in text  # verbatim: relevance=span finds the chunk
    assert candidate.generator == "cloze" and len(candidate.prompt_hash) == 12


def test_cloze_refuses_vague_or_unmatched_sentences():
    for text in ("It is the default.", "The limit is 5.", "Bananas grow in bunches on tall plants."):
        with pytest.raises(NoCandidate):
            ClozeGenerator().make(Source("factual", (chunk(text),)))


def test_cloze_multi_hop_joins_a_fact_from_each_document():
    pair = (chunk("Pebble is an embedded store.", "a"), chunk("To enable clustering, set cluster.enabled.", "b"))
    candidate = ClozeGenerator().make(Source("multi_hop", pair))
    assert candidate.question == "What is Pebble, and how do you enable clustering?"
    assert candidate.evidence == ("Pebble is an embedded store.", "To enable clustering, set cluster.enabled.")
    assert candidate.source.doc_ids == ["a", "b"]


def test_quotas_follow_the_mix():
    assert quotas(10, {"factual": 0.3, "procedural": 0.2, "comparative": 0.15, "troubleshooting": 0.15,
                       "multi_hop": 0.2}) == {"factual": 3, "procedural": 2, "comparative": 2, "troubleshooting": 1,
                                              "multi_hop": 2}
    assert quotas(3, {"factual": 1}) == {"factual": 3}
    with pytest.raises(RagexpError, match="unknown question type opinion"):
        quotas(3, {"opinion": 1})
    with pytest.raises(RagexpError, match="synth.size"):
        quotas(0, {"factual": 1})


def test_stratified_order_takes_documents_and_sections_in_turn():
    docs = [Document("big", "# A\n" + "a " * 50 + "\n# B\n" + "b " * 50), Document("small", "s " * 20)]
    chunks = [Chunk(f"big#{i}", "big", "x", start, start + 10) for i, start in enumerate((0, 20, 60, 110))]
    chunks.append(Chunk("small#0", "small", "y", 0, 10))
    order = stratified(chunks, docs, seed=3)
    assert len(order) == 5 and {c.doc_id for c in order[:2]} == {"big", "small"}  # documents take turns
    first_two_big = [c for c in order if c.doc_id == "big"][:2]
    assert {c.start < 56 for c in first_two_big} == {True, False}  # then sections A and B take turns


def sample_chunks():
    dataset = from_yaml("dataset/sample").load()
    return dataset, RecursiveChunker(512, 64).chunk(dataset.documents)


def test_cloze_run_on_the_sample_spreads_over_documents(tmp_path):
    dataset, chunks = sample_chunks()
    plan = SourcePlan(chunks, dataset.documents, seed=0, embedder=from_yaml("embedder/hash"))
    mix = {"factual": 0.4, "procedural": 0.4, "troubleshooting": 0.2}
    result = generate(ClozeGenerator(), quality_rules(), plan, from_yaml("embedder/hash"), size=30, mix=mix, seed=0)
    per_doc = Counter(d for c in result.kept for d in c.source.doc_ids)
    assert len(result.kept) >= 15 and max(per_doc.values()) <= 1  # ceil(30 / 30 documents)
    assert result.skipped_sources > 0  # the share was enforced, not just met by chance
    assert len({c.question for c in result.kept}) == len(result.kept)
    again = generate(ClozeGenerator(), quality_rules(), SourcePlan(chunks, dataset.documents, 0, from_yaml("embedder/hash")),
                     from_yaml("embedder/hash"), size=30, mix=mix, seed=0)
    assert [c.question for c in again.kept] == [c.question for c in result.kept]  # seeded: reproducible


def test_near_duplicates_are_removed_and_reported():
    source = Source("factual", (chunk("Pebble is an embedded key-value store."),))
    first, twin = (Candidate(source, q, "Pebble is an embedded key-value store.") for q in ("What is Pebble?", "What is Pebble ?"))
    other = Candidate(source, "Which store is embedded?", "Pebble is an embedded key-value store.")
    kept, rejected = quality_rules().dedupe([first, twin, other], [], from_yaml("embedder/hash"))
    assert kept == [first, other]
    assert [r.reason for r in rejected] == ["near_duplicate"] and "What is Pebble?" in rejected[0].detail


def write_sample_set(tmp_path):
    dataset, chunks = sample_chunks()
    plan = SourcePlan(chunks, dataset.documents, seed=0, embedder=from_yaml("embedder/hash"))
    result = generate(ClozeGenerator(), quality_rules(), plan, from_yaml("embedder/hash"), size=30,
                      mix={"factual": 0.5, "procedural": 0.5}, seed=0, max_per_document=3)
    return write_dataset(tmp_path / "synthetic", result, dataset.documents, {}), result, chunks


def test_the_folder_loads_with_dataset_jsonl_and_synthetic(tmp_path):
    folder, result, chunks = write_sample_set(tmp_path)
    plain = build(compose("dataset=jsonl", f"dataset.path={folder}").dataset).load()
    typed = build(compose("dataset=synthetic", f"dataset.path={folder}").dataset).load()
    assert len(plain.questions) == len(typed.questions) == len(result.kept)
    assert len(plain.documents) == 30
    assert {q.source for q in plain.questions} == {"synthetic"}
    assert Counter(q.kind for q in typed.questions) == Counter(c.source.type for c in result.kept)
    first = json.loads((folder / "questions.jsonl").read_text().splitlines()[0])
    assert {"question", "answer", "golden_docs", "type", "source", "generator", "prompt_hash", "source_chunks"} <= set(first)
    assert first["source_chunks"][0]["text"] in plain.documents[[d.doc_id for d in plain.documents].index(
        first["golden_docs"][0])].text
    rule = from_yaml("relevance/span")
    rule.prepare(chunks)
    for question, candidate in zip(typed.questions, result.kept):
        assert question.golden == {candidate.source.doc_ids[0]: 1}
        source_hit = Hit(candidate.source.chunks[0], 1.0, 1)
        judged = rule.grade(question, [source_hit])
        assert judged.ranking is not None and judged.ranking.grades[0] == 1  # span finds its source chunk


def test_mix_keeps_the_ratio_and_each_source(tmp_path):
    folder, result, _ = write_sample_set(tmp_path)
    n_synthetic = len(result.kept)
    mixed = build(compose("dataset=mix", f"dataset.synthetic.path={folder}").dataset).load()
    sources = Counter(q.source for q in mixed.questions)
    assert sources["synthetic"] == n_synthetic and sources["golden"] == round(n_synthetic / 0.8) - n_synthetic
    assert all(q.qid.startswith(f"{q.source}:") for q in mixed.questions)
    assert len(mixed.documents) == 30 and any("synthetic_share=0.8" in n for n in mixed.notes)
    half = build(compose("dataset=mix", f"dataset.synthetic.path={folder}", "dataset.synthetic_share=0.5",
                         "dataset.size=20").dataset).load()
    assert Counter(q.source for q in half.questions) == {"synthetic": 10, "golden": 10}
    with pytest.raises(RagexpError, match="needs 200 synthetic"):
        build(compose("dataset=mix", f"dataset.synthetic.path={folder}", "dataset.size=250").dataset).load()


@pytest.mark.parametrize("option", ["cloze", "llm"])
def test_synth_config_composes_with_each_generator(option):
    cfg = synth_config(f"synth/generator={option}", "synth.size=7")
    generator = build(cfg.synth.generator)
    assert set(generator.types) == set(TYPES)
    assert quotas(cfg.synth.size, cfg.synth.mix) and build(cfg.synth.quality)
