"""`run(cfg)`: the stages in order — load, chunk, index, retrieve, generate, judge, aggregate."""
from __future__ import annotations

import logging
from dataclasses import replace

from omegaconf import DictConfig

from ragexp.datasets import fingerprint
from ragexp.errors import RagexpError
from ragexp.metrics.generation import scorecard
from ragexp.metrics.names import MetricName
from ragexp.progress import progress
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


def run(cfg: DictConfig, name: str = "run") -> RunResult:
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
    dataset = loader.load()
    if not dataset.questions:
        raise RagexpError(f"dataset: no questions in {dataset.name} (check dataset.path and dataset.limit)")
    notes = data_notes(dataset)
    for note in notes:
        log.warning(note)

    chunks = chunker.chunk(dataset.documents)
    log.info("%d documents -> %d chunks", len(dataset.documents), len(chunks))
    retriever.index(chunks)
    rule.prepare(chunks)
    top_k = retriever.top_k
    ranked = retriever.search([q.text for q in dataset.questions], max(top_k, metric_set.depth))

    results = []
    for question, question_hits in progress(zip(dataset.questions, ranked), desc="answering and judging",
                                            total=len(dataset.questions)):
        judged = rule.judge(question, question_hits)
        result = answer_and_judge(question, tuple(question_hits[:top_k]), generator, judge)
        results.append(replace(
            result,
            retrieval=metric_set.retrieval_scores(judged.ranking, rule.level) if judged.ranking else {},
            retrieval_excluded=judged.excluded,
            generation=answer_scores(result, metric_set, scales),
        ))
    notes += retrieval_notes(results, rule.name)
    aggregates = aggregate(results, weights)
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
        scales={k: s for k, s in scales.items() if k in aggregates},
        statuses=assess(aggregates, scales),
        gate=verdict,
    )


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
