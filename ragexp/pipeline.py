"""`run(cfg)`: the stages in order — load, chunk, index, retrieve, generate, judge, aggregate."""
from __future__ import annotations

import logging

from omegaconf import DictConfig, OmegaConf

from ragexp.cache import EmbeddingStore, StageCache, key_of
from ragexp.datasets import corpus_fingerprint, fingerprint
from ragexp.embedders import STATS, use_store
from ragexp.errors import RagexpError
from ragexp.progress import progress
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


def run(cfg: DictConfig, name: str = "run") -> RunResult:
    weights = build(cfg.weights)  # checked first: a bad weight set fails before any work
    cache = build(cfg.cache)
    use_store(EmbeddingStore(cache.dir) if cache.enabled else None)
    embedded_before = STATS["embedded_texts"]
    dataset = build(cfg.dataset).load()
    if not dataset.questions:
        raise RagexpError(f"dataset: no questions in {dataset.name} (check dataset.path and dataset.limit)")
    chunker, retriever = build(cfg.chunker), build(cfg.retriever)
    generator, judge = build(cfg.generator), build(cfg.judge)
    weights.check(judge.name, judge.metrics)
    notes = data_notes(dataset)
    for note in notes:
        log.warning(note)

    chunks_key = key_of("chunks", corpus_fingerprint(dataset.documents), settings(cfg.chunker))
    chunks = cache.cached("chunks", chunks_key, lambda: chunker.chunk(dataset.documents))
    log.info("%d documents -> %d chunks", len(dataset.documents), len(chunks))
    queries = [q.text for q in dataset.questions]

    def retrieve():
        retriever.index(chunks)
        return retriever.search(queries)

    hits = cache.cached("hits", key_of("hits", chunks_key, settings(cfg.retriever), queries), retrieve)

    stage = Stage(cache, generator, settings(cfg.generator), judge, settings(cfg.judge))
    results = [stage.answer_and_judge(question, tuple(question_hits))
               for question, question_hits in progress(zip(dataset.questions, hits), desc="answering and judging",
                                                       total=len(dataset.questions))]
    return RunResult(
        name=name,
        aggregates=aggregate(results, weights),
        questions=tuple(results),
        judge=judge.name,
        dataset_fingerprint=fingerprint(dataset),
        notes=tuple(notes),
        counters={**cache.stats, "embedded_texts": STATS["embedded_texts"] - embedded_before},
    )


class Stage:
    """Answering and judging one question, each step served from the cache when its inputs
    (component settings, question, retrieved texts, answer) were seen before."""

    def __init__(self, cache: StageCache, generator, generator_settings: dict, judge, judge_settings: dict):
        self.cache, self.generator, self.judge = cache, generator, judge
        self.generator_settings, self.judge_settings = generator_settings, judge_settings

    def answer_and_judge(self, question, hits) -> QuestionResult:
        """One question to its end state: judged, or failed with the reason. Failures are not
        cached, so a re-run tries them again."""
        if not question.answers:
            return QuestionResult(question, hits, failure="no expected answer in the dataset")
        context = [(h.chunk.chunk_id, h.chunk.text) for h in hits]
        try:
            answer = self.cache.cached("answers", key_of("answer", self.generator_settings, question.text, context),
                                       lambda: self.generator.generate(question.text, hits))
        except RagexpError:
            raise
        except Exception as err:  # one bad question never fails the run
            return QuestionResult(question, hits, failure=f"generation failed: {type(err).__name__}: {err}")
        try:
            key = key_of("judgement", self.judge_settings, question.text, question.answers, context, answer.text)
            judgement = self.cache.cached("judgements", key, lambda: self.judge.judge(question, hits, answer))
        except RagexpError:
            raise
        except Exception as err:
            return QuestionResult(question, hits, answer, failure=f"judging failed: {type(err).__name__}: {err}")
        return QuestionResult(question, hits, answer, judgement)
