"""The `extractive` generator: the retrieved sentences most like the question, no LLM."""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from ragexp.base.text import split_sentences
from ragexp.types import Answer, Hit
from ragexp.base.settings import Cosine, PositiveInt
from ragexp.components.generators.base import Generator


class ExtractiveGenerator(Generator):
    """Offline baseline: answers with the retrieved sentences most similar to the question
    (cosine of their embeddings), best first, up to `max_sentences` and `max_chars`. Abstention
    rule: when even the best sentence's cosine with the question is below `abstain_below` (null:
    never), it answers `abstention` instead ("I don't know."); with nothing retrieved, it answers
    the empty string (which also counts as abstaining).

    Its answers are context sentences copied as they are, so every judge that checks them against
    the context finds them faithful: faithfulness, hallucination and claim_hallucination_rate hold
    by construction (`holds_by_construction`; the console and run.json say so instead of rating
    them against their targets)."""

    holds_by_construction = ("faithfulness", "hallucination", "claim_hallucination_rate")

    def __init__(self, embedder, max_sentences: PositiveInt, max_chars: PositiveInt,
                 abstain_below: Cosine | None, abstention: str):
        self.embedder = embedder
        self.max_sentences, self.max_chars = max_sentences, max_chars
        self.abstain_below, self.abstention = abstain_below, abstention

    def generate(self, question: str, hits: Sequence[Hit]) -> Answer:
        started = time.perf_counter()
        sentences = list(dict.fromkeys(s for hit in hits for s in split_sentences(hit.chunk.text)))
        if not sentences:
            return Answer("", time.perf_counter() - started)
        vectors = self.embedder.embed([question, *sentences])
        similarity = vectors[1:] @ vectors[0]
        if self.abstain_below is not None and float(similarity.max()) < self.abstain_below:
            return Answer(self.abstention, time.perf_counter() - started)
        order = np.argsort(-similarity, kind="stable")
        chosen: list[str] = []
        for i in order[: self.max_sentences]:
            if chosen and len(" ".join([*chosen, sentences[i]])) > self.max_chars:
                break
            chosen.append(sentences[i][: self.max_chars])
        return Answer(" ".join(chosen), time.perf_counter() - started)
