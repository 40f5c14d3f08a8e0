"""Generators: (question, retrieved hits) -> answer. One class per `generator` option."""
from __future__ import annotations

from typing import Sequence

from ragexp.types import Answer, Hit


class Generator:
    """The contract of a `generator` option: `generate(question, hits)` returns the `Answer` (its
    text and the seconds it took). A generator that sends chat requests is also a `UsesLLM`
    (ragexp.llm.component), which gives it its client and lists its requests for `dry_run=true`."""

    # judge metrics its answers satisfy by construction (an extractive answer copies the context):
    # the console and run.json say so instead of rating them against their targets
    holds_by_construction: tuple[str, ...] = ()

    def generate(self, question: str, hits: Sequence[Hit]) -> Answer:
        raise NotImplementedError
