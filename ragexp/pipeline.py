"""`run(cfg)`: the stages in order — load, chunk, index, retrieve, generate, judge, aggregate."""
from __future__ import annotations

import logging

from omegaconf import DictConfig

from ragexp.datasets import fingerprint
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


def run(cfg: DictConfig, name: str = "run") -> RunResult:
    weights = build(cfg.weights)  # checked first: a bad weight set fails before any work
    dataset = build(cfg.dataset).load()
    if not dataset.questions:
        raise RagexpError(f"dataset: no questions in {dataset.name} (check dataset.path and dataset.limit)")
    chunker, retriever = build(cfg.chunker), build(cfg.retriever)
    generator, judge = build(cfg.generator), build(cfg.judge)
    weights.check(judge.name, judge.metrics)
    notes = data_notes(dataset)
    for note in notes:
        log.warning(note)

    chunks = chunker.chunk(dataset.documents)
    log.info("%d documents -> %d chunks", len(dataset.documents), len(chunks))
    retriever.index(chunks)
    hits = retriever.search([q.text for q in dataset.questions])

    results = []
    for question, question_hits in progress(zip(dataset.questions, hits), desc="answering and judging",
                                            total=len(dataset.questions)):
        results.append(answer_and_judge(question, tuple(question_hits), generator, judge))
    return RunResult(
        name=name,
        aggregates=aggregate(results, weights),
        questions=tuple(results),
        judge=judge.name,
        dataset_fingerprint=fingerprint(dataset),
        notes=tuple(notes),
    )


def answer_and_judge(question, hits, generator, judge) -> QuestionResult:
    """One question to its end state: judged, or failed with the reason."""
    if not question.answers:
        return QuestionResult(question, hits, failure="no expected answer in the dataset")
    try:
        answer = generator.generate(question.text, hits)
    except RagexpError:
        raise
    except Exception as err:  # one bad question never fails the run
        return QuestionResult(question, hits, failure=f"generation failed: {type(err).__name__}: {err}")
    try:
        return QuestionResult(question, hits, answer, judge.judge(question, hits, answer))
    except RagexpError:
        raise
    except Exception as err:
        return QuestionResult(question, hits, answer, failure=f"judging failed: {type(err).__name__}: {err}")
