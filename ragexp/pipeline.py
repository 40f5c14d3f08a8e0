"""`run(cfg)`: the stages in order — load, chunk, index, retrieve, generate, judge, aggregate."""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from ragexp.cache import EmbeddingStore, key_of
from ragexp.concurrency import concurrency, map_concurrently
from ragexp.datasets import corpus_fingerprint, fingerprint
from ragexp.embedders import STATS, use_store
from ragexp.errors import QuestionFailed, RagexpError
from ragexp.llm.estimate import Estimate
from ragexp.llm.session import LLMSession
from ragexp.metrics.generation import scorecard
from ragexp.metrics.names import MetricName
from ragexp.scoring import aggregate, aggregate_scales
from ragexp.targets import assess
from ragexp.types import Dataset, QuestionResult, RunResult

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


def listed(ids: list[str], limit: int = 10) -> str:
    return ", ".join(ids[:limit]) + (" ..." if len(ids) > limit else "")


def data_notes(dataset: Dataset) -> list[str]:
    """Problems in the data that are reported with the run instead of stopping it."""
    notes = []
    if dataset.skipped_rows:
        notes.append(f"{len(dataset.skipped_rows)} malformed rows skipped (dataset.on_error=skip): "
                     + "; ".join(dataset.skipped_rows[:5]) + (" ..." if len(dataset.skipped_rows) > 5 else ""))
    if dataset.skipped_documents:
        notes.append(f"{len(dataset.skipped_documents)} empty documents skipped: {', '.join(dataset.skipped_documents[:10])}")
    for what, missing in (
        ("no expected answer", [q.qid for q in dataset.questions if not q.answers]),
        ("no golden documents", [q.qid for q in dataset.questions if not q.golden]),
    ):
        if missing:
            notes.append(f"{len(missing)} questions with {what}: {listed(missing)}")
    unanswerable = [q for q in dataset.questions if not q.answerable]
    if unanswerable:
        notes.append(f"{len(unanswerable)} questions marked unanswerable (expected answer: {unanswerable[0].expected!r})")
    corpus = {d.doc_id for d in dataset.documents}
    unknown = sorted({d for q in dataset.questions for d, g in q.golden.items() if g > 0 and d not in corpus})
    if unknown:
        notes.append(f"{len(unknown)} golden document ids are not in the corpus: {listed(unknown)}")
    return [*notes, *dataset.notes]


def retrieval_notes(results: list[QuestionResult], rule: str) -> list[str]:
    """Questions left out of the retrieval means, by reason: said, never silent."""
    reasons: dict[str, list[str]] = {}
    for r in results:
        if r.retrieval_excluded:
            reasons.setdefault(r.retrieval_excluded, []).append(r.question.qid)
    return [f"{len(ids)} questions excluded from retrieval metrics (relevance={rule}: {why}): {listed(ids)}"
            for why, ids in reasons.items()]


def settings(node: DictConfig) -> dict:
    """A component's resolved config: what goes into its stage's cache key."""
    return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]  # a DictConfig gives a dict


def run(cfg: DictConfig, name: str = "run") -> RunResult | Estimate:
    """The stages in order. With `dry_run=true`, stops after retrieval and returns what the LLM
    requests of the run would be and cost (an Estimate) instead of making them."""
    # every component is built and checked against the others before any work (building is cheap)
    weights = build(cfg.weights)
    gate, metric_set, rule = build(cfg.gate), build(cfg.metrics), build(cfg.relevance)
    metric_set.require(gate.retrieval_metrics())
    loader, chunker, retriever = build(cfg.dataset), build(cfg.chunker), build(cfg.retriever)
    generator, judge = build(cfg.generator), build(cfg.judge)
    weights.check(judge.name, judge.metrics)
    answer_metrics = [*metric_set.answer_metrics(), "generation_score"]
    scales = aggregate_scales(getattr(judge, "scales", {}), weights, answer_metrics, metric_set.names)
    produced = [f"avg_{m}" for m in (*judge.metrics, *answer_metrics)] + [MetricName.parse(n).key for n in metric_set.names]
    gate.check([*produced, "hallucination_rate", "overall_score", "total_questions", "failed_questions",
                "retrieval_excluded_questions"], scales, f" (judge {judge.name!r} gives {', '.join(judge.metrics)})")
    llm = build(cfg.llm) if "llm" in cfg else LLMSession()
    cache = build(cfg.cache)
    use_store(EmbeddingStore(cache.dir) if cache.enabled else None)
    embedded_before = dict(STATS)
    try:
        llm.connect(generator=generator, judge=judge)  # API keys and endpoints too
        dataset = loader.load()
        if not dataset.questions:
            raise RagexpError(f"dataset: no questions in {dataset.name} (check dataset.path and dataset.limit)")
        notes = data_notes(dataset)
        for note in notes:
            log.warning(note)

        # each stage's output is cached under a key of what determines it (see ragexp.cache)
        chunks_key = key_of("chunks", corpus_fingerprint(dataset.documents), settings(cfg.chunker))
        clock = Clock()
        chunks = clock.time("chunking", lambda: cache.cached("chunks", chunks_key, lambda: chunker.chunk(dataset.documents)))
        log.info("%d documents -> %d chunks", len(dataset.documents), len(chunks))
        rule.prepare(chunks)
        queries, top_k = [q.text for q in dataset.questions], retriever.top_k
        depth = max(top_k, metric_set.depth)  # the metrics see deeper than the generator's top_k

        def retrieve():
            before = STATS["embedded_texts"]
            clock.time("indexing", lambda: retriever.index(chunks))
            STATS["index_embedded_texts"] += STATS["embedded_texts"] - before
            return retriever.search(queries, depth)

        hits_key = key_of("hits", chunks_key, settings(cfg.retriever), queries, depth)
        ranked = clock.time("retrieval", lambda: cache.cached("hits", hits_key, retrieve))
        hits = [tuple(question_hits[:top_k]) for question_hits in ranked]
        if llm.dry_run:
            return llm.estimate(name, dataset.questions, hits)

        # per question, keyed by the component's settings and the content it reads; a failure
        # raises, so it is never cached and a re-run tries it again
        generator_settings, judge_settings = settings(cfg.generator), settings(cfg.judge)

        def generate(question: str, hits):
            key = key_of("answer", generator_settings, question, context(hits))
            return cache.cached("answers", key, lambda: generator.generate(question, hits))

        def judge_one(question, hits, answer):
            key = key_of("judgement", judge_settings, question.text, question.answers, context(hits), answer.text)
            return cache.cached("judgements", key, lambda: judge.judge(question, hits, answer))

        answered = clock.time("generation", lambda: map_concurrently(
            lambda item: answer(generate, *item), zip(dataset.questions, hits), concurrency(generator), desc="generating"))
        judged_results = clock.time("judging", lambda: map_concurrently(
            lambda result: judged(judge_one, result), answered, concurrency(judge), desc="judging"))
        results = []
        for result, question_ranked in zip(judged_results, ranked):
            relevance = rule.judge(result.question, question_ranked)
            results.append(replace(
                result,
                retrieval=metric_set.retrieval_scores(relevance.ranking, rule.level) if relevance.ranking else {},
                retrieval_excluded=relevance.excluded,
                generation=answer_scores(result, metric_set, scales),
            ))
        notes += retrieval_notes(results, rule.name)
        aggregates = {**aggregate(results, weights), **llm.stats()}
        verdict = gate.evaluate(aggregates, scales) if gate.active else None
        if verdict is not None:
            aggregates["gate_passed"] = int(verdict.passed)
        return RunResult(
            name=name,
            aggregates=aggregates,
            questions=tuple(results),
            judge=judge.name,
            dataset_fingerprint=fingerprint(dataset),
            notes=tuple(notes),
            counters={**cache.stats, **{k: v - embedded_before.get(k, 0) for k, v in STATS.items()}},
            timings=clock.seconds,
            scales={k: s for k, s in scales.items() if k in aggregates},
            statuses=assess(aggregates, scales),
            gate=verdict,
        )
    finally:
        llm.close()


def answer_scores(result: QuestionResult, metric_set, scales: dict) -> dict[str, float]:
    """The answer against the expected answers, and the specification's generation scorecard
    from the judge's faithfulness, conciseness and coherence on 0-1 (see metrics.generation)."""
    if result.answer is None or not result.question.answers:
        return {}
    scores = metric_set.answer_scores(result.answer.text, result.question.answers)
    if result.judgement is not None:
        unit = {}
        judged = result.judgement.scores
        for part, names in (("faithfulness", ("faithfulness",)), ("conciseness", ("conciseness", "conciseness_offline")),
                            ("coherence", ("coherence", "coherence_offline"))):
            name = next((n for n in names if n in judged and f"avg_{n}" in scales), None)
            if name is not None:
                lo, hi = scales[f"avg_{name}"]
                unit[part] = (judged[name] - lo) / (hi - lo)
        if "correctness" in scores:
            unit["correctness"] = scores["correctness"]
        card = scorecard(unit)
        if card is not None:
            scores["generation_score"] = round(card, 4)
    return scores


class Clock:
    """Wall time per stage (seconds), logged as it goes and kept for the tracker."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def time(self, stage: str, work: Callable):
        started = time.perf_counter()
        value = work()
        self.seconds[stage] = round(self.seconds.get(stage, 0.0) + time.perf_counter() - started, 4)
        log.info("%s: %.1fs", stage, self.seconds[stage])
        return value


def context(hits) -> list[tuple[str, str]]:
    return [(h.chunk.chunk_id, h.chunk.text) for h in hits]


def answer(generate: Callable, question, hits) -> QuestionResult:
    """One question to its answer, or failed with the reason (one bad question never fails the run)."""
    if not question.answers:
        return QuestionResult(question, hits, failure="no expected answer in the dataset")
    try:
        return QuestionResult(question, hits, generate(question.text, hits))
    except RagexpError:
        raise
    except QuestionFailed as err:  # its message names the stage ("generator: ...") or says "budget: ..."
        return QuestionResult(question, hits, failure=str(err))
    except Exception as err:
        return QuestionResult(question, hits, failure=f"generation failed: {type(err).__name__}: {err}")


def judged(judge: Callable, result: QuestionResult) -> QuestionResult:
    """An answered question judged, or failed with the reason."""
    if result.answer is None:  # failed before judging
        return result
    try:
        return replace(result, judgement=judge(result.question, result.hits, result.answer))
    except RagexpError:
        raise
    except QuestionFailed as err:
        return replace(result, failure=str(err))
    except Exception as err:
        return replace(result, failure=f"judging failed: {type(err).__name__}: {err}")
