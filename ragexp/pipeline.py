"""`run(cfg)`: the stages in order — load, chunk, index, retrieve, generate, judge, aggregate."""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from ragexp.cache import EmbeddingStore, StageCache, key_of
from ragexp.concurrency import concurrency, map_concurrently
from ragexp.datasets import corpus_fingerprint, fingerprint
from ragexp.embedders import STATS, use_store
from ragexp.errors import QuestionFailed, RagexpError
from ragexp.llm.estimate import Estimate
from ragexp.llm.session import LLMSession
from ragexp.scoring import aggregate
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


def data_notes(dataset: Dataset) -> list[str]:
    """Problems in the data that are reported with the run instead of stopping it."""
    notes = []
    if dataset.skipped_documents:
        notes.append(f"{len(dataset.skipped_documents)} empty documents skipped: {', '.join(dataset.skipped_documents[:10])}")
    for what, missing in (
        ("no expected answer", [q.qid for q in dataset.questions if not q.answers]),
        ("no golden documents", [q.qid for q in dataset.questions if not q.golden]),
    ):
        if missing:
            notes.append(f"{len(missing)} questions with {what}: {', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}")
    return notes


def settings(node: DictConfig) -> dict:
    """A component's resolved config: what goes into its stage's cache key."""
    return OmegaConf.to_container(node, resolve=True)


def run(cfg: DictConfig, name: str = "run") -> RunResult | Estimate:
    """The stages in order. With `dry_run=true`, stops after retrieval and returns what the LLM
    requests of the run would be and cost (an Estimate) instead of making them."""
    weights = build(cfg.weights)  # settings are checked first: a bad one fails before any work
    chunker, retriever = build(cfg.chunker), build(cfg.retriever)
    generator, judge = build(cfg.generator), build(cfg.judge)
    weights.check(judge.name, judge.metrics)
    llm = build(cfg.llm) if "llm" in cfg else LLMSession()
    cache = build(cfg.cache)
    use_store(EmbeddingStore(cache.dir) if cache.enabled else None)
    embedded_before = STATS["embedded_texts"]
    try:
        llm.connect(generator=generator, judge=judge)  # API keys and endpoints too
        dataset = build(cfg.dataset).load()
        if not dataset.questions:
            raise RagexpError(f"dataset: no questions in {dataset.name} (check dataset.path and dataset.limit)")
        notes = data_notes(dataset)
        for note in notes:
            log.warning(note)

        # each stage's output is cached under a key of what determines it (see ragexp.cache)
        chunks_key = key_of("chunks", corpus_fingerprint(dataset.documents), settings(cfg.chunker))
        chunks = cache.cached("chunks", chunks_key, lambda: chunker.chunk(dataset.documents))
        log.info("%d documents -> %d chunks", len(dataset.documents), len(chunks))
        queries = [q.text for q in dataset.questions]

        def retrieve():
            retriever.index(chunks)
            return retriever.search(queries)

        hits = cache.cached("hits", key_of("hits", chunks_key, settings(cfg.retriever), queries), retrieve)
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

        started = time.perf_counter()
        answered = map_concurrently(lambda item: answer(generate, *item), zip(dataset.questions, map(tuple, hits)),
                                    concurrency(generator), desc="generating")
        log.info("generated %d answers in %.1fs", len(answered), time.perf_counter() - started)
        started = time.perf_counter()
        results = map_concurrently(lambda result: judged(judge_one, result), answered, concurrency(judge), desc="judging")
        log.info("judged %d answers in %.1fs", len(results), time.perf_counter() - started)
        return RunResult(
            name=name,
            aggregates={**aggregate(results, weights), **llm.stats()},
            questions=tuple(results),
            judge=judge.name,
            dataset_fingerprint=fingerprint(dataset),
            notes=tuple(notes),
            counters={**cache.stats, "embedded_texts": STATS["embedded_texts"] - embedded_before},
        )
    finally:
        llm.close()


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
