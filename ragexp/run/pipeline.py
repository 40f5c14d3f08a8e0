"""`run(cfg)`: the stages in order — load; the system under test answers (ragexp's own pipeline:
chunk, index, retrieve, score retrieval, generate; or recorded outputs, a function, a service);
judge; aggregate."""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from functools import partial
from typing import Sequence

from omegaconf import DictConfig, open_dict

from ragexp.base.concurrency import concurrency, map_concurrently
from ragexp.base.pairing import pairing_id
from ragexp.base.progress import working
from ragexp.components.systems import System
from ragexp.config.build import Components, build, components
from ragexp.datasets import corpus_fingerprint, fingerprint
from ragexp.errors import QuestionFailed, RagexpError
from ragexp.judges.contract import Judge, context
from ragexp.judges.judging import judged_results
from ragexp.llm.estimate import Estimate
from ragexp.metrics import MetricSet, metric_key
from ragexp.metrics.relevance import CONTEXT_METRICS
from ragexp.metrics.gate import threshold_intervals
from ragexp.metrics.generation import abstention_scores, scorecard
from ragexp.metrics.regression import refuse_shared_questions
from ragexp.metrics.scoring import Aggregate, by_construction, run_aggregates, score_row
from ragexp.metrics.targets import assess
from ragexp.run import embedding_map
from ragexp.run.notes import data_notes, not_given, retrieval_notes
from ragexp.run.rerank import rerank_results
from ragexp.run.work import Work, load, own_stage
from ragexp.store.cache import key_of
from ragexp.store.code_identity import identify_ahead
from ragexp.store.tracing import documents, ended
from ragexp.types import Answer, Dataset, Hit, Output, Question, QuestionResult, RunResult

log = logging.getLogger(__name__)


def run(cfg: DictConfig, name: str = "run", for_folder: dict | None = None) -> RunResult:
    """The stages in order: load; the system under test answers each question (ragexp's own pipeline,
    or recorded outputs, your function or your service: see ragexp.components.systems); judge;
    aggregate. A config with `dry_run=true` is for `estimate`. `for_folder`, when given, receives what
    the run folder gets beside the result: `embedding_map`, the points of ragexp.run.embedding_map, and
    `judge_files`, the files the judge adds (Judge.run_files) (kept out of RunResult: ragexp.types is
    in every component's code identity, so its every edit is a miss)."""
    outcome = stages(cfg, name, for_folder)
    if isinstance(outcome, Estimate):
        raise RagexpError("dry_run=true makes no request and judges nothing: estimate(cfg) tells what the run "
                          "would ask (python -m ragexp ... dry_run=true prints it)")
    return outcome


def estimate(cfg: DictConfig, name: str = "run") -> Estimate:
    """What the LLM requests of the run would be and cost, making none: the stages up to the first
    LLM request (retrieval included), as `dry_run=true` runs them."""
    if "llm" not in cfg:
        raise RagexpError("llm: the config has no llm node, so nothing says what a request costs")
    planned = cfg.copy()
    with open_dict(planned):
        planned.dry_run = True
        planned.llm.dry_run = True
    outcome = stages(planned, name)
    assert isinstance(outcome, Estimate)  # every stage stops before its first request in a dry run
    return outcome


def stages(cfg: DictConfig, name: str, for_folder: dict | None = None) -> RunResult | Estimate:
    """`run`'s stages; with `dry_run=true` they stop before any LLM request, with the Estimate."""
    work = Work(build(cfg.cache))
    with work.embeddings.building():  # the embedders built here share the run's embedding cache
        c = components(cfg)
    identify_ahead(c.settings)  # the components' code read while the first stages work, not on the judging clock
    try:
        c.llm.connect(generator=c.generator, reranker=c.reranker, rubric=c.rubric, **c.judge.roles())  # keys, endpoints too
        c.llm.connect_embedders(work.embeddings.embedders)  # embedder=openai: counted with the LLM traffic
        with working("reading the data"):
            dataset = load(c.loader, build(cfg.question_sample) if "question_sample" in cfg else None)
        if c.gate.baseline:
            refuse_shared_questions(dataset.questions, f"dataset.path={cfg.dataset.get('path')}" if cfg.dataset.get("path")
                           else "the rows given")
        work.traces = build(cfg.tracing).recorder(dataset.questions) if "tracing" in cfg else None
        notes = data_notes(dataset)
        for note in notes:
            log.warning(note)

        if c.system.own:  # ragexp's own: chunk -> index -> retrieve -> rerank -> generate over the corpus
            results = pipeline_answers(c, work, dataset, notes, name)
        else:  # recorded outputs, your function or your service: (answer, contexts) per question
            results = system_answers(c, work, dataset, notes, name)
        if isinstance(results, Estimate):
            return replace(results, notes=(*results.notes, *c.judge.planned_notes(len(dataset.questions))))

        results, judged_notes = own_stage(work, "judging", None, judged_results, c.judging, results, work, c.settings["judge"])
        notes += judged_notes
        labelled = any(not q.answerable for q in dataset.questions)  # else no abstention can be right or wrong
        results = [replace(r, generation=answer_scores(r, c.metric_set, c.judge, labelled)) for r in results]
        if for_folder is not None:
            for_folder["judge_files"] = c.judge.run_files(results)
        if for_folder is not None and cfg.get("embedding_map") is not False and c.system.own:
            for_folder["embedding_map"] = embedding_map.points(getattr(c.retriever, "embedder", None), results,
                                                          c.judge.scales)

        spec, aggregates = run_aggregates(results, c.weights, c.llm.stats(), list(cfg.get("slices") or ()))
        constructed = by_construction(c.generator)  # e.g. the faithfulness of copied context sentences
        rows = {pairing_id(r.question.qid, r.question.text, r.question.id_from_row): score_row(r)
                for r in results if r.judgement is not None} if c.gate.baseline else None
        metrics = [*c.judge.metrics, *(["hallucination"] if c.judge.flags_hallucination else [])]
        intervals = threshold_intervals(c.gate, spec, [score_row(r) for r in results]) if c.gate.thresholds else None
        not_judged = {m: why for r in results if r.judgement is not None
                      for m, why in r.judgement.details.get("not_judged", {}).items()}
        retrieval = [metric_key(n) for n in (*c.metric_set.names, *CONTEXT_METRICS)]
        verdict = c.gate.evaluate(aggregates, c.scales, constructed, rows, metrics, intervals, not_judged,
                                  not_given(results, retrieval, aggregates)) if c.gate.active else None
        if verdict is not None:
            aggregates["gate_passed"] = int(verdict.passed)
            spec += (Aggregate("gate_passed", (), "gate", "all"),)
            if c.gate.baseline:  # for a sweep's correction across its jobs (ragexp.sweep.callbacks)
                given = {"gate_thresholds_passed": int(verdict.thresholds_passed),
                         **{f"regression_p_{metric}": round(p, 6) for metric, p in verdict.regression.items()}}
                aggregates.update(given)
                spec += tuple(Aggregate(key, (), "gate", "all") for key in given)
        return RunResult(
            name=name,
            aggregates=aggregates,
            questions=tuple(results),
            judge=c.judge.name,
            dataset_fingerprint=fingerprint(dataset),
            notes=tuple(notes),
            counters={**work.cache.stats, **work.embeddings.stats, **c.system.counters()},
            timings=work.seconds,
            scales={k: s for k, s in c.scales.items() if k in aggregates},
            statuses=assess(aggregates, c.scales, constructed, c.targets, c.untargeted),
            gate=verdict,
            aggregation=spec,
            relevance={"rule": c.rule.name, "level": c.rule.level, "gain": c.metric_set.ndcg_gain},
            traces=tuple(work.traces.records()) if work.traces is not None else (),
        )
    finally:
        c.system.close()
        c.llm.close()


def pipeline_answers(c: Components, work: Work, dataset: Dataset, notes: list[str], name: str) -> list[QuestionResult] | Estimate:
    """ragexp's own pipeline as the system under test: chunk, index, retrieve (and score the
    retrieval), rerank (when a reranker is chosen: ragexp.run.rerank), generate; each stage's output cached under a key of what determines it (see
    ragexp.store.cache). With `dry_run=true`, the Estimate of the run's LLM requests, after retrieval."""
    assert c.chunker is not None and c.retriever is not None  # built for system=pipeline
    chunks_key = key_of("chunks", corpus_fingerprint(dataset.documents), c.settings["chunker"])
    chunks = own_stage(work, "chunking", chunks_key, c.chunker.chunk, dataset.documents)
    log.info("%d documents -> %d chunks", len(dataset.documents), len(chunks))
    queries = [q.text for q in dataset.questions]
    # the metrics see deeper than the generator's top_k, the reranker takes its candidates from this list
    depth = max(c.retriever.top_k, c.metric_set.depth, c.reranker.candidates)
    # a retriever over an index ragexp does not own (retriever=qdrant_collection) searches every run
    cacheable = c.retriever.cacheable
    hits_key = key_of("hits", chunks_key, c.settings["retriever"], queries, depth) if cacheable else None
    retrieval_started, served = time.time_ns(), work.cache.stats["hits_cached"]
    # each query's ranking is also kept on its own, without top_k (the ranking `depth` deep does not depend
    # on it): a grid's other top_k, a racing sweep's next round, search only the queries not stored yet
    search_settings = {k: v for k, v in c.settings["retriever"].items() if k != "top_k"}
    question_key = partial(key_of, "question_hits", chunks_key, search_settings, depth) if cacheable else None
    ranked = own_stage(work, "retrieval", hits_key, work.index_then_search, c.retriever, chunks, queries, depth,
                        question_key)
    if work.traces is not None:
        cache = "hit" if work.cache.stats["hits_cached"] > served else "miss"
        work.traces.batch("retrieve", "RETRIEVER", retrieval_started, time.time_ns(), {
            q.qid: ({"query": q.text}, documents(hits[: c.retriever.top_k]), {"ragexp.cache": cache})
            for q, hits in zip(dataset.questions, ranked)})

    c.rule.prepare(chunks)
    results = [retrieval_scored(c, question, hits) for question, hits in zip(dataset.questions, ranked)]
    if c.reranker.active and not c.llm.dry_run:  # see ragexp.run.rerank
        results = own_stage(work, "reranking", None, rerank_results, work, c.reranker, c.settings["reranker"], results,
                             partial(retrieval_scored, c))
    notes += retrieval_notes(results, c.rule.name)
    if c.llm.dry_run:
        return c.llm.estimate(name, dataset.questions, [r.hits for r in results],
                              {"reranker": [r.ranked[: c.reranker.candidates] for r in results]},
                              c.judge.planned(dataset.questions))

    answer = partial(answer_question, work, c.generator, c.settings["generator"])
    return own_stage(work, "generation", None, map_concurrently, answer, results, concurrency(c.generator), "generating")


def system_answers(c: Components, work: Work, dataset: Dataset, notes: list[str],
                   name: str) -> list[QuestionResult] | Estimate:
    """Another system under test: each question's answer and contexts from it (`concurrency(system)`
    at once; cached under its settings when it has any), then the retrieval metrics of the contexts
    it gave, when they carry document ids and the question has golden documents. With
    `dry_run=true`, the Estimate of the judge's LLM requests."""
    for note in c.system.start(dataset):
        log.warning(note)
        notes.append(note)
    answer = partial(system_answer, work, c.system)
    results = own_stage(work, "answering", None, map_concurrently, answer, dataset.questions, concurrency(c.system),
                         f"asking {c.system.name}")
    c.rule.prepare([h.chunk for r in results for h in r.hits])
    results = [replace(retrieval_scored(c, r.question, r.hits, len(r.hits)), answer=r.answer, failure=r.failure)
               if not r.hits or ids_given(r.hits) or not r.question.golden else
               replace(r, retrieval_excluded=UNNAMED_CONTEXTS) for r in results]
    if any(r.question.golden for r in results):
        notes += retrieval_notes(results, c.rule.name)
    if c.llm.dry_run:
        return c.llm.estimate(name, dataset.questions, [r.hits for r in results], role_questions=c.judge.planned(dataset.questions))
    return results


UNNAMED_CONTEXTS = ("its contexts carry no document ids, so no golden document can be found among them: give each "
                    "context its id (contexts as objects with a doc_id, or a context_ids column)")


def ids_given(hits: Sequence[Hit]) -> bool:
    """Whether the system under test named the documents of its contexts: a context given as text
    alone gets `context-<rank>` (ragexp.components.systems.base.hits_from_contexts), which no golden
    document matches; its retrieval metrics would be 0 for want of a name, not of a document."""
    return any(h.chunk.doc_id != f"context-{h.rank}" for h in hits)


def system_answer(work: Work, system: System, question: Question) -> QuestionResult:
    """One question answered by the system under test (cached under its settings when it has any),
    or failed with the reason (one bad question never fails the run; a failure is never cached)."""
    system_settings = system.settings()
    with work.span(question.qid, "system", "CHAIN", {"question": question.text}) as span:
        try:
            if system_settings is None:
                output = system.respond(question)
            else:
                key = key_of("answer", system_settings, *system.asked(question))
                output = work.cached("answer", key, system.respond, question, span=span, expect=partial(holding, Output))
            result = QuestionResult(question, output.hits, answer=output.answer)
        except QuestionFailed as err:  # its message names the stage ("system: ...") or says "budget: ..."
            result = QuestionResult(question, failure=str(err))
        # anything else is a bug (or a setting to fix: RagexpError): it ends the run, as in answer_question
        return ended(span, result, result.answer.text if result.answer else None)


def retrieval_scored(c: Components, question: Question, ranked: Sequence[Hit], top_k: int | None = None) -> QuestionResult:
    """A question with its hits (the generator's `top_k`, default the retriever's), the retrieval metrics of its ranking
    (`depth` deep) and the context metrics of its top_k, or why it has none; the ranking and the
    judgements they used are kept for the run folder's TREC files."""
    graded = c.rule.grade(question, ranked)
    if top_k is None:  # ragexp's pipeline: the retriever's; another system gives its own (all its contexts)
        assert c.retriever is not None
        top_k = c.retriever.top_k
    hits = tuple(ranked[:top_k])
    scores = c.metric_set.retrieval_scores(graded.ranking, c.rule.level) if graded.ranking else {}
    return QuestionResult(
        question, hits, retrieval={**scores, **graded.context_scores([c.rule.item(h) for h in hits], c.rule.level)},
        retrieval_excluded=graded.excluded, ranked=tuple(ranked),
        ranking=graded.ranking.ids if graded.ranking else (), judged=graded.judged,
    )


def answer_scores(result: QuestionResult, metric_set: MetricSet, judge: Judge, labelled: bool = True) -> dict[str, float]:
    """The answer against the expected answers, whether it abstained (and whether it should have, when
    the questions are `labelled` answerable or not: see metrics.generation.abstention_scores), and
    the generation scorecard from the judge's scores that feed it (`judge.scorecard`) on 0-1 (see
    metrics.generation)."""
    if result.answer is None:
        return {}
    question = result.question
    scores = metric_set.answer_scores(result.answer.text, question.answers) if question.answers else {}
    scores.update(abstention_scores(result.answer.text, question.answerable, labelled))
    if result.judgement is not None:
        judged, scales = result.judgement.scores, judge.scales
        unit = {part: (judged[metric] - scales[metric][0]) / (scales[metric][1] - scales[metric][0])
                for part, metric in judge.scorecard.items() if metric in judged and metric in scales}
        if "correctness" in scores:
            unit["correctness"] = scores["correctness"]
        card = scorecard(unit)
        if card is not None:
            scores["generation_score"] = round(card, 4)
    return scores


def holding(kind: type, value) -> str | None:
    """What is wrong with a stored answer entry (see Work.cached): not a `kind` (an Answer of the
    generator, an Output of the system under test); else None."""
    return None if isinstance(value, kind) else f"an answer entry holds a {type(value).__name__}"


def answer_question(work: Work, generator, generator_settings: dict, result: QuestionResult) -> QuestionResult:
    """One question to its answer, cached under the generator's settings and the content it reads;
    or failed with the reason when the generator raised a `QuestionFailed` (an endpoint error, an
    empty reply, the budget: one bad question never fails the run; a failure is never cached). Any
    other exception is a bug in a component and ends the run (exit status 1, with its traceback)."""
    question, hits = result.question, result.hits
    if result.failure:  # failed before generation (reranking)
        return result
    key = key_of("answer", generator_settings, question.text, context(hits))
    with work.span(question.qid, "generate", "CHAIN", {"question": question.text, "context": context(hits)}) as span:
        try:
            result = replace(result, answer=work.cached("answer", key, generator.generate, question.text, hits, span=span,
                                                        expect=partial(holding, Answer)))
        except QuestionFailed as err:  # its message names the stage ("generator: ...") or says "budget: ..."
            result = replace(result, failure=str(err))
        # anything else is a bug (or a setting to fix: RagexpError): it ends the run, traceback and all
        return ended(span, result, result.answer.text if result.answer else None)
