"""`run(cfg)`: the stages in order — load; the system under test answers (ragexp's own pipeline:
chunk, index, retrieve, score retrieval, generate; or recorded outputs, a function, a service);
judge; aggregate."""
from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Sequence

from omegaconf import DictConfig, OmegaConf

from ragexp.store.cache import StageCache, key_of, stage_code_hash
from ragexp.components.rerankers import NoReranker, Reranker
from ragexp.base.concurrency import concurrency, map_concurrently
from ragexp.datasets import corpus_fingerprint, fingerprint
from ragexp.components.embedders import EmbeddingCache
from ragexp.errors import QuestionFailed, RagexpError
from ragexp.components.systems import PipelineSystem, System
from ragexp.judges.contract import Judge, reference_free
from ragexp.llm.estimate import Estimate
from ragexp.llm.session import LLMSession
from ragexp.metrics import MetricSet
from ragexp.metrics.generation import abstention_scores, scorecard
from ragexp.run.notes import data_notes, retrieval_notes
from ragexp.metrics.relevance import CONTEXT_METRICS, RelevanceRule
from ragexp.metrics.scoring import Aggregate, Weights, aggregate_key, aggregate_scales, by_construction, run_aggregates
from ragexp.metrics.targets import assess
from ragexp.run.rerank import STAGE as RERANK_STAGE, rerank_results
from ragexp.store.tracing import documents, ended
from ragexp.types import Chunk, Dataset, Hit, Question, QuestionResult, RunResult

if TYPE_CHECKING:
    from ragexp.components.chunkers import Chunker
    from ragexp.datasets import Loader
    from ragexp.datasets.subset import QuestionSample
    from ragexp.metrics.gate import Gate
    from ragexp.components.retrievers import Retriever
    from ragexp.store.tracing import TraceRecorder

log = logging.getLogger(__name__)


def build(node: DictConfig, **kwargs):
    """`hydra.utils.instantiate`, with a RagexpError raised inside a constructor passed on as is."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        while cause is not None and not isinstance(cause, RagexpError):
            cause = cause.__cause__
        if cause is not None:
            raise cause from None
        raise RagexpError(str(err).replace("\n", " ")) from None


def settings(node: DictConfig) -> dict:
    """A component's resolved config: what goes into its stage's cache key."""
    return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]  # a DictConfig gives a dict


@dataclass
class Components:
    """A run's components, each built from its config node (building is cheap). The chunker,
    retriever and generator exist only when the system under test is ragexp's own pipeline."""

    weights: Weights
    gate: Gate
    metric_set: MetricSet
    rule: RelevanceRule
    loader: Loader
    system: System
    chunker: Chunker | None
    retriever: Retriever | None
    reranker: Reranker
    generator: Any
    judge: Judge
    llm: LLMSession
    scales: dict[str, tuple[float, float]]


def components(cfg: DictConfig) -> Components:
    """Every component built and checked against the others, before any work."""
    weights = build(cfg.weights)
    gate, metric_set, rule = build(cfg.gate), build(cfg.metrics), build(cfg.relevance)
    metric_set.require(gate.retrieval_metrics())
    system = build(cfg.system) if "system" in cfg else PipelineSystem()
    loader, judge = build(cfg.dataset), build(cfg.judge)
    chunker, retriever, generator = (build(cfg.chunker), build(cfg.retriever), build(cfg.generator)) if system.own \
        else (None, None, None)
    reranker = build(cfg.reranker) if system.own and "reranker" in cfg else NoReranker()
    reranker.check()
    weights.check(judge.name, judge.metrics)
    answer_metrics = [*metric_set.answer_metrics(), "generation_score"]
    retrieval_metrics = [*metric_set.names, *CONTEXT_METRICS]
    scales = aggregate_scales(getattr(judge, "scales", {}), weights, answer_metrics, retrieval_metrics)
    produced = ([aggregate_key(m) for m in (*judge.metrics, *answer_metrics)]
                + [aggregate_key(n, retrieval=True) for n in retrieval_metrics])
    gate.check([*produced, "hallucination_rate", "overall_score", "total_questions", "failed_questions",
                "retrieval_excluded_questions"], scales, f" (judge {judge.name!r} gives {', '.join(judge.metrics)})")
    llm = build(cfg.llm) if "llm" in cfg else LLMSession()
    return Components(weights, gate, metric_set, rule, loader, system, chunker, retriever, reranker, generator, judge,
                      llm, scales)


def run(cfg: DictConfig, name: str = "run") -> RunResult | Estimate:
    """The stages in order: load; the system under test answers each question (ragexp's own pipeline,
    or recorded outputs, your function or your service: see ragexp.components.systems); judge;
    aggregate. With `dry_run=true`, stops before any LLM request and returns what the LLM requests of
    the run would be and cost (an Estimate) instead of making them."""
    work = Work(build(cfg.cache))
    with work.embeddings.building():  # the embedders built here share the run's embedding cache
        c = components(cfg)
    try:
        c.llm.connect(generator=c.generator, judge=c.judge, reranker=c.reranker)  # API keys and endpoints too
        c.llm.connect_embedders(work.embeddings.embedders)  # embedder=openai: counted with the LLM traffic
        dataset = load(c.loader, build(cfg.question_sample) if "question_sample" in cfg else None)
        work.traces = build(cfg.tracing).recorder(dataset.questions) if "tracing" in cfg else None
        notes = data_notes(dataset)
        for note in notes:
            log.warning(note)

        if c.system.own:  # ragexp's own: chunk -> index -> retrieve -> rerank -> generate over the corpus
            results = pipeline_answers(cfg, c, work, dataset, notes, name)
        else:  # recorded outputs, your function or your service: (answer, contexts) per question
            results = system_answers(c, work, dataset, notes, name)
        if isinstance(results, Estimate):
            return results

        judge = partial(judge_answer, work, c.judge, settings(cfg.judge))
        results = work.stage("judging", None, map_concurrently, judge, results, concurrency(c.judge), "judging")
        results = [replace(r, generation=answer_scores(r, c.metric_set, c.judge)) for r in results]

        spec, aggregates = run_aggregates(results, c.weights, c.llm.stats(), list(cfg.get("slices") or ()))
        constructed = by_construction(c.generator)  # e.g. the faithfulness of copied context sentences
        verdict = c.gate.evaluate(aggregates, c.scales, constructed) if c.gate.active else None
        if verdict is not None:
            aggregates["gate_passed"] = int(verdict.passed)
            spec += (Aggregate("gate_passed", (), "gate", "all"),)
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
            statuses=assess(aggregates, c.scales, constructed),
            gate=verdict,
            aggregation=spec,
            relevance={"rule": c.rule.name, "level": c.rule.level, "gain": c.metric_set.ndcg_gain},
            traces=tuple(work.traces.records()) if work.traces is not None else (),
        )
    finally:
        c.system.close()
        c.llm.close()


def pipeline_answers(cfg: DictConfig, c: Components, work: Work, dataset: Dataset, notes: list[str],
                     name: str) -> list[QuestionResult] | Estimate:
    """ragexp's own pipeline as the system under test: chunk, index, retrieve (and score the
    retrieval), rerank (when a reranker is chosen: ragexp.run.rerank), generate; each stage's output cached under a key of what determines it (see
    ragexp.store.cache). With `dry_run=true`, the Estimate of the run's LLM requests, after retrieval."""
    assert c.chunker is not None and c.retriever is not None  # built for system=pipeline
    chunks_key = key_of("chunks", corpus_fingerprint(dataset.documents), settings(cfg.chunker))
    chunks = work.stage("chunking", chunks_key, c.chunker.chunk, dataset.documents)
    log.info("%d documents -> %d chunks", len(dataset.documents), len(chunks))
    queries = [q.text for q in dataset.questions]
    # the metrics see deeper than the generator's top_k, the reranker takes its candidates from this list
    depth = max(c.retriever.top_k, c.metric_set.depth, c.reranker.candidates)
    # a retriever over an index ragexp does not own (retriever=qdrant_collection) searches every run
    cacheable = c.retriever.cacheable
    hits_key = key_of("hits", chunks_key, settings(cfg.retriever), queries, depth) if cacheable else None
    retrieval_started, served = time.time_ns(), work.cache.stats["hits_cached"]
    # each query's ranking is also kept on its own, without top_k (the ranking `depth` deep does not depend
    # on it): a grid's other top_k, a racing sweep's next round, search only the queries not stored yet
    search_settings = {k: v for k, v in settings(cfg.retriever).items() if k != "top_k"}
    question_key = partial(key_of, "question_hits", chunks_key, search_settings, depth) if cacheable else None
    ranked = work.stage("retrieval", hits_key, work.index_then_search, c.retriever, chunks, queries, depth,
                        question_key)
    if work.traces is not None:
        cache = "hit" if work.cache.stats["hits_cached"] > served else "miss"
        work.traces.batch("retrieve", "RETRIEVER", retrieval_started, time.time_ns(), {
            q.qid: ({"query": q.text}, documents(hits[: c.retriever.top_k]), {"ragexp.cache": cache})
            for q, hits in zip(dataset.questions, ranked)})

    c.rule.prepare(chunks)
    results = [retrieval_scored(c, question, hits) for question, hits in zip(dataset.questions, ranked)]
    if c.reranker.active and not c.llm.dry_run:  # see ragexp.run.rerank
        results = work.stage("reranking", None, rerank_results, work, c.reranker, settings(cfg.reranker), results,
                             partial(retrieval_scored, c))
    notes += retrieval_notes(results, c.rule.name)
    if c.llm.dry_run:
        return c.llm.estimate(name, dataset.questions, [r.hits for r in results],
                              {"reranker": [r.ranked[: c.reranker.candidates] for r in results]})

    answer = partial(answer_question, work, c.generator, settings(cfg.generator))
    return work.stage("generation", None, map_concurrently, answer, results, concurrency(c.generator), "generating")


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
    results = work.stage("answering", None, map_concurrently, answer, dataset.questions, concurrency(c.system),
                         f"asking {c.system.name}")
    c.rule.prepare([h.chunk for r in results for h in r.hits])
    results = [replace(retrieval_scored(c, r.question, r.hits, len(r.hits)), answer=r.answer, failure=r.failure)
               for r in results]
    if any(r.question.golden for r in results):
        notes += retrieval_notes(results, c.rule.name)
    if c.llm.dry_run:
        return c.llm.estimate(name, dataset.questions, [r.hits for r in results])
    return results


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
                output = work.cached("answer", key, system.respond, question, span=span)
            result = QuestionResult(question, output.hits, answer=output.answer)
        except QuestionFailed as err:  # its message names the stage ("system: ...") or says "budget: ..."
            result = QuestionResult(question, failure=str(err))
        # anything else is a bug (or a setting to fix: RagexpError): it ends the run, as in answer_question
        return ended(span, result, result.answer.text if result.answer else None)


class Work:
    """One run's working state, made by `run()` and dropped with it: the stage cache, the
    embedding cache shared by every embedder of the run (with the stage cache's on-disk store
    when caching is on), and the wall time of each stage (`seconds[stage]`) and the process's CPU
    time in it, every thread's (`seconds[stage + "_cpu"]`)."""

    # stage -> its folder in the stage cache
    STORED_AS = {"chunking": "chunks", "retrieval": "hits", RERANK_STAGE: "reranked", "answer": "answers",
                 "judgement": "judgements"}

    def __init__(self, cache: StageCache):
        self.cache = cache
        self.embeddings = EmbeddingCache.beside(cache)
        self.seconds: dict[str, float] = {}
        self.traces: TraceRecorder | None = None  # tracing=on: the traced questions' spans

    def stage(self, name: str, key: str | None, compute: Callable, *args):
        """`compute(*args)`, timed as stage `name` (logged as it goes, kept in `seconds`); with a
        `key`, served from the stage cache when stored there, else computed and stored."""
        started, cpu_started = time.perf_counter(), time.process_time()
        value = self.cached(name, key, compute, *args) if key is not None else compute(*args)
        self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - started, 4)
        self.seconds[f"{name}_cpu"] = round(self.seconds.get(f"{name}_cpu", 0.0) + time.process_time() - cpu_started, 4)
        log.info("%s: %.2fs (cpu %.2fs)", name, self.seconds[name], self.seconds[f"{name}_cpu"])
        return value

    def cached(self, name: str, key: str, compute: Callable, *args, span: dict | None = None):
        """`compute(*args)` through the stage cache, not timed (a per-question step of a stage); a
        traced `span` is told whether the cache served it (`ragexp.store.cache`: hit or miss)."""
        computed = []

        def compute_and_note():
            computed.append(True)
            return compute(*args)

        value = self.cache.cached(self.STORED_AS[name], key, compute_and_note)
        if span is not None:
            span["attributes"]["ragexp.cache"] = "miss" if computed else "hit"
        return value

    def span(self, qid: str, name: str, span_type: str, inputs):
        """A traced span of question `qid` around a block (a no-op when tracing is off)."""
        return self.traces.span(qid, name, span_type, inputs) if self.traces is not None else nullcontext()

    def index_then_search(self, retriever, chunks: Sequence[Chunk], queries: list[str], depth: int,
                          question_key: Callable[[str], str] | None = None):
        """Indexes the chunks (timed as `indexing`; its embedded texts counted as
        `index_embedded_texts`), then ranks `depth` chunks per query. Called only when the
        run's hits are not in the stage cache. With `question_key(query)`, each query's ranking
        is looked up and stored on its own (stage `question_hits`): only the queries not stored are
        searched, and nothing is indexed when every one is."""
        keys = [key_of(question_key(q), stage_code_hash(Work.index_then_search)) for q in queries] if question_key else []
        found = {i: hits for i, key in enumerate(keys) if (hits := self.cache.get("question_hits", key)) is not None}
        missing = [i for i in range(len(queries)) if i not in found]
        self.cache.stats["question_hits_cached"] += len(found) if keys else 0
        self.cache.stats["question_hits_computed"] += len(missing) if keys else 0
        if missing:
            before = self.embeddings.stats["embedded_texts"]
            self.stage("indexing", None, retriever.index, chunks)
            self.embeddings.stats["index_embedded_texts"] += self.embeddings.stats["embedded_texts"] - before
            for i, hits in zip(missing, retriever.search([queries[i] for i in missing], depth)):
                found[i] = hits
                if keys:
                    self.cache.put("question_hits", keys[i], hits)
        return [found[i] for i in range(len(queries))]


def load(loader, sample: QuestionSample | None = None) -> Dataset:
    """The loader's dataset, on the `question_sample` of its questions when one is set."""
    dataset = loader.load()
    if sample is not None:
        dataset = sample.apply(dataset)
    if not dataset.questions:
        raise RagexpError(f"dataset: no questions in {dataset.name} (check dataset.path and dataset.limit)")
    return dataset


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


def answer_scores(result: QuestionResult, metric_set: MetricSet, judge: Judge) -> dict[str, float]:
    """The answer against the expected answers, whether it abstained (and whether it should have: see
    metrics.generation.abstention_scores), and the specification's generation scorecard from the
    judge's scores that feed it (`judge.scorecard`) on 0-1 (see metrics.generation)."""
    if result.answer is None:
        return {}
    question = result.question
    scores = metric_set.answer_scores(result.answer.text, question.answers) if question.answers else {}
    scores.update(abstention_scores(result.answer.text, question.answerable))
    if result.judgement is not None:
        judged, scales = result.judgement.scores, getattr(judge, "scales", {})
        unit = {part: (judged[metric] - scales[metric][0]) / (scales[metric][1] - scales[metric][0])
                for part, metric in getattr(judge, "scorecard", {}).items() if metric in judged and metric in scales}
        if "correctness" in scores:
            unit["correctness"] = scores["correctness"]
        card = scorecard(unit)
        if card is not None:
            scores["generation_score"] = round(card, 4)
    return scores


def context(hits) -> list[tuple[str, str]]:
    return [(h.chunk.chunk_id, h.chunk.text) for h in hits]


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
            result = replace(result, answer=work.cached("answer", key, generator.generate, question.text, hits, span=span))
        except QuestionFailed as err:  # its message names the stage ("generator: ...") or says "budget: ..."
            result = replace(result, failure=str(err))
        # anything else is a bug (or a setting to fix: RagexpError): it ends the run, traceback and all
        return ended(span, result, result.answer.text if result.answer else None)


def judge_answer(work: Work, judge: Judge, judge_settings: dict, result: QuestionResult) -> QuestionResult:
    """An answered question judged (cached like its answer), or failed with the reason of a
    `QuestionFailed` (an endpoint error, an unreadable reply, a missing field); any other exception
    is a bug and ends the run, as in `answer_question`. A question without a reference keeps only
    the judge's metrics that need none (`reference_free`)."""
    if result.answer is None:  # failed before judging
        return result
    question, hits, answer = result.question, result.hits, result.answer
    key = key_of("judgement", judge_settings, question.text, question.answers, context(hits), answer.text)
    inputs = {"question": question.text, "answer": answer.text, "expected": list(question.answers)}
    with work.span(question.qid, "judge", "EVALUATOR", inputs) as span:
        try:
            judgement = work.cached("judgement", key, judge.judge, question, hits, answer, span=span)
            if question.answerable and not question.answers:  # nothing to compare the answer with
                judgement = reference_free(judgement, judge)
            result = replace(result, judgement=judgement)
        except QuestionFailed as err:  # an expected failure (endpoint, unreadable reply, budget); others end the run
            result = replace(result, failure=str(err))
        j = result.judgement
        return ended(span, result, {"scores": j.scores, "reasoning": j.reasoning} if j else None)
