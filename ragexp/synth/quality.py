"""The rules a candidate question must pass, in the order they are applied (cheap ones first, so
an LLM verdict is only asked for candidates that passed the others). Each rejection names its rule.

- `length`: question and answer word counts within bounds;
- `copied_sentence`: the question is not a sentence of the source with a question mark: the
  Jaccard similarity of its content words and those of every source sentence is below `copy_similarity`;
- `low_overlap`: at least `min_overlap` of the answer's content words occur in the source(s)
  (words compared on their first 6 letters, so "listens" matches "listen");
- `single_source` (multi-hop): the evidence quotes come from both chunks;
- `near_duplicate`: the question's cosine (scoring embedder) with every question kept before it is
  below `duplicate_cosine`;
- `ungrounded`: the LLM verdict (LLM generator with `verify: true`) says the answer is not
  supported by the source.
Generation itself can reject: `unparsable` (no readable JSON after a re-ask), `request_failed`,
`budget`. (A chunk where no cloze template fits makes no candidate: it is counted apart.)"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ragexp.errors import RagexpError
from ragexp.synth.candidates import Candidate, Rejection
from ragexp.base.settings import Fraction, NonNegativeInt
from ragexp.base.text import split_sentences, words

RULES = ("unparsable", "request_failed", "budget", "length", "copied_sentence", "low_overlap",
         "single_source", "near_duplicate", "ungrounded")


def stems(text: str) -> set[str]:
    return {w[:6] for w in words(text)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def pair(value, setting: str) -> tuple[int, int]:
    try:
        low, high = (int(v) for v in value)
    except (TypeError, ValueError):
        raise RagexpError(f"{setting} must be [min, max] word counts, got {value!r}") from None
    if not 0 <= low <= high:
        raise RagexpError(f"{setting} must be [min, max] with 0 <= min <= max, got {value!r}")
    return low, high


class QualityRules:
    """The rules a synthetic question must pass (`synth.quality`, whose values are in conf/synth.yaml)."""

    def __init__(self, question_words: Sequence[NonNegativeInt], answer_words: Sequence[NonNegativeInt],
                 min_overlap: Fraction, copy_similarity: Fraction, duplicate_cosine: Fraction):
        self.question_words = pair(question_words, "synth.quality.question_words")
        self.answer_words = pair(answer_words, "synth.quality.answer_words")
        for name, value in (("min_overlap", min_overlap), ("copy_similarity", copy_similarity),
                            ("duplicate_cosine", duplicate_cosine)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise RagexpError(f"synth.quality.{name} must be between 0 and 1, got {value!r}")
        self.min_overlap, self.copy_similarity, self.duplicate_cosine = min_overlap, copy_similarity, duplicate_cosine

    def check(self, candidate: Candidate) -> Rejection | None:
        """The first rule (before dedupe and the LLM verdict) that `candidate` breaks, or None."""
        def reject(reason: str, detail: str) -> Rejection:
            return Rejection(reason, candidate.source, detail, candidate)

        for what, text, (low, high) in (("question", candidate.question, self.question_words),
                                        ("answer", candidate.answer, self.answer_words)):
            n = len(text.split())
            if not low <= n <= high:
                return reject("length", f"{what} has {n} words, outside [{low}, {high}]")
        question = stems(candidate.question)
        for sentence in split_sentences(candidate.source.text):
            if sentence.startswith("#") or len(stems(sentence)) < 3:  # headings are not sentences to copy
                continue
            similarity = jaccard(question, stems(sentence))
            if similarity >= self.copy_similarity:
                return reject("copied_sentence", f"word similarity {similarity:.2f} with {sentence[:120]!r}")
        answer, source = stems(candidate.answer), stems(candidate.source.text)
        overlap = len(answer & source) / len(answer) if answer else 0.0
        if overlap < self.min_overlap:
            return reject("low_overlap", f"{overlap:.2f} of the answer's words are in the source (< {self.min_overlap})")
        if candidate.source.type == "multi_hop" and candidate.evidence:
            quoted = [c.chunk_id for c in candidate.source.chunks
                      if any(normalised(q) in normalised(c.text) for q in candidate.evidence)]
            if len(quoted) < len(candidate.source.chunks):
                return reject("single_source", f"the evidence quotes only {', '.join(quoted) or 'none'} of the two chunks")
        return None

    def dedupe(self, candidates: Sequence[Candidate], kept: Sequence[str], embedder) -> tuple[list, list]:
        """Candidates whose question is below `duplicate_cosine` of every question in `kept` and of
        every earlier candidate kept here; the others as rejections."""
        if not candidates:
            return [], []
        vectors = embedder.embed([*kept, *(c.question for c in candidates)])
        chosen = list(range(len(kept)))
        fresh, rejected = [], []
        for n, candidate in enumerate(candidates, start=len(kept)):
            if chosen:
                similarity = vectors[chosen] @ vectors[n]
                best = int(np.argmax(similarity))
                if similarity[best] >= self.duplicate_cosine:
                    twin = kept[best] if best < len(kept) else candidates[chosen[best] - len(kept)].question
                    rejected.append(Rejection("near_duplicate", candidate.source,
                                              f"cosine {similarity[best]:.3f} with {twin!r}", candidate))
                    continue
            chosen.append(n)
            fresh.append(candidate)
        return fresh, rejected


def normalised(text: str) -> str:
    return " ".join(text.lower().split())
