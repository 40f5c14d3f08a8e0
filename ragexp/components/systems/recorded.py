"""`system=recorded`: what a system already answered, read by `dataset=outputs`."""
from __future__ import annotations

from ragexp.errors import RagexpError
from ragexp.types import Dataset, Output, Question
from ragexp.components.systems.base import System


class RecordedOutputs(System):
    """The answers and contexts a system already produced, as `dataset=outputs` read them: nothing
    is chunked, indexed, retrieved or generated."""

    name = "recorded"

    def __init__(self):
        self.outputs: dict[str, Output] = {}

    def start(self, dataset: Dataset) -> list[str]:
        if not dataset.outputs:
            raise RagexpError(f"system=recorded: {dataset.name} holds no recorded outputs; use dataset=outputs "
                              "dataset.path=FILE (question, contexts, answer per row)")
        self.outputs = dict(dataset.outputs)
        answered = sum(o.answer is not None for o in self.outputs.values())
        return [] if answered else [f"retrieval only: no row of {dataset.name} has an answer; nothing is judged"]

    def respond(self, question: Question) -> Output:
        return self.outputs[question.qid]
