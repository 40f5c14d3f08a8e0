"""What a run reports about its data and its questions instead of stopping: the notes of the summary."""
from __future__ import annotations

from ragexp.types import Dataset, QuestionResult


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
        ("no expected answer", [q.qid for q in dataset.questions if not q.answers and q.answerable]),
        ("no golden documents", [q.qid for q in dataset.questions if not q.golden]),
    ):
        if missing and (what != "no golden documents" or len(missing) < len(dataset.questions) or dataset.documents):
            notes.append(f"{len(missing)} questions with {what}: {listed(missing)}")
    unanswerable = [q for q in dataset.questions if not q.answerable]
    if unanswerable:
        notes.append(f"{len(unanswerable)} questions marked unanswerable: an abstention is their correct answer "
                     "(avg_abstention_recall, avg_answered_unanswerable)")
    corpus = {d.doc_id for d in dataset.documents}
    unknown = sorted({d for q in dataset.questions for d, g in q.golden.items() if g > 0 and d not in corpus})
    if unknown and dataset.documents:  # recorded outputs have no corpus: their contexts carry the ids
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


def not_given(results: list[QuestionResult], names: list[str], aggregates: dict) -> dict[str, str]:
    """The retrieval metrics (MLflow keys of `names`) the data gave nothing to compute: no question
    was scored on them (each left out with its reason, e.g. no golden documents) -> why."""
    if any(not r.retrieval_excluded for r in results):
        return {}
    reasons = sorted({r.retrieval_excluded for r in results})
    why = f"no question to score it on: {'; '.join(reasons)}" if reasons else "no question to score it on"
    return {name: why for name in names if name not in aggregates}
