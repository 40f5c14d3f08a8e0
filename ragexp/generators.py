"""Generators: (question, retrieved hits) -> answer."""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from ragexp.text import split_sentences
from ragexp.types import Answer, Hit


class ExtractiveGenerator:
    """Offline baseline: answers with the retrieved sentences most similar to the question
    (cosine of their embeddings), best first, up to `max_sentences` and `max_chars`."""

    def __init__(self, embedder, max_sentences: int = 2, max_chars: int = 400):
        self.embedder = embedder
        self.max_sentences, self.max_chars = max_sentences, max_chars

    def generate(self, question: str, hits: Sequence[Hit]) -> Answer:
        started = time.perf_counter()
        sentences = list(dict.fromkeys(s for hit in hits for s in split_sentences(hit.chunk.text)))
        if not sentences:
            return Answer("", time.perf_counter() - started)
        vectors = self.embedder.embed([question, *sentences])
        order = np.argsort(-(vectors[1:] @ vectors[0]), kind="stable")
        chosen: list[str] = []
        for i in order[: self.max_sentences]:
            if chosen and len(" ".join([*chosen, sentences[i]])) > self.max_chars:
                break
            chosen.append(sentences[i][: self.max_chars])
        return Answer(" ".join(chosen), time.perf_counter() - started)
