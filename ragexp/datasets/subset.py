"""`question_sample`: a run on a seeded sample of the dataset's questions, whatever the loader.

The questions are ordered by a hash of (seed, question id) and the first `size` are kept (in the
dataset's own order). The order does not depend on `size`, so samples of one seed are nested: the
50 questions of `question_sample.size=50` are among the 100 of `size=100`. A racing sweep
(`hydra/sweeper=racing`) grows its rounds this way, and the stage cache then serves a survivor's
earlier questions. The corpus is never sampled: retrieval stays as hard as on the full set."""
from __future__ import annotations

import hashlib
from dataclasses import replace

from ragexp.types import Dataset, Question
from ragexp.base.settings import PositiveInt


def sample_order(questions: tuple[Question, ...] | list[Question], seed: int) -> list[Question]:
    """The questions in the seeded order a sample takes them from (its first `size`)."""
    return sorted(questions, key=lambda q: (hashlib.sha256(f"{seed}\0{q.qid}".encode()).hexdigest(), q.qid))


class QuestionSample:
    """`size` questions drawn with `seed` (null: every question). A size at or above the dataset's
    question count keeps them all (said in the run's notes)."""

    def __init__(self, size: PositiveInt | None, seed: int):
        self.size, self.seed = size, seed

    def apply(self, dataset: Dataset) -> Dataset:
        if self.size is None:
            return dataset
        total = len(dataset.questions)
        if self.size >= total:
            note = f"question_sample.size={self.size}: the dataset has {total} questions, all used"
            return replace(dataset, notes=(*dataset.notes, note)) if self.size > total else dataset
        kept = {q.qid for q in sample_order(dataset.questions, self.seed)[: self.size]}
        questions = tuple(q for q in dataset.questions if q.qid in kept)
        note = f"question_sample: {self.size} of {total} questions (seed {self.seed})"
        return replace(dataset, questions=questions, notes=(*dataset.notes, note))
