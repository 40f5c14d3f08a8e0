"""The offline judge: the specification's single-call metrics by embedding similarity, without an LLM."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ragexp.judges.contract import Judge
from ragexp.metrics.generation import coherence_offline, conciseness_offline
from ragexp.text import split_sentences
from ragexp.types import Answer, Hit, Judgement, Question


def to_scale(share: float) -> float:
    """A share in [0, 1] mapped linearly onto the 1-10 scale (0 -> 1, 1 -> 10)."""
    return round(1.0 + 9.0 * float(np.clip(share, 0.0, 1.0)), 3)


class OfflineJudge(Judge):
    """Scores without an LLM, by embedding similarity (labelled `offline-<embedder>` everywhere):

    - context_relevance = 1 + 9 * (share of retrieved sentences whose cosine with the question
      is at least `relevance_threshold`);
    - answer_similarity = 1 + 9 * max(0, cosine(generated answer, expected answer));
    - faithfulness = 1 + 9 * (share of answer sentences supported by some context sentence:
      cosine at least `support_threshold`, or contained verbatim in the context);
    - hallucination = some answer sentence is supported by no context sentence;
    - claim_hallucination_rate = unsupported answer sentences / answer sentences (0-1; the
      specification's hallucination rate with sentences as claims);
    - conciseness_offline, coherence_offline: see ragexp.metrics.generation (0-1 estimates).
    """

    metrics = ("context_relevance", "answer_similarity", "faithfulness",
               "claim_hallucination_rate", "conciseness_offline", "coherence_offline")
    scales = {"context_relevance": (1.0, 10.0), "answer_similarity": (1.0, 10.0), "faithfulness": (1.0, 10.0),
              "claim_hallucination_rate": (0.0, 1.0), "conciseness_offline": (0.0, 1.0), "coherence_offline": (0.0, 1.0)}
    scorecard = {"faithfulness": "faithfulness", "conciseness": "conciseness_offline", "coherence": "coherence_offline"}

    def __init__(self, embedder, relevance_threshold: float = 0.35, support_threshold: float = 0.8, name: str | None = None):
        self.embedder = embedder
        self.relevance_threshold, self.support_threshold = relevance_threshold, support_threshold
        self.name = name or f"offline-{embedder.name}"

    def judge(self, question: Question, hits: Sequence[Hit], answer: Answer) -> Judgement:
        context = " ".join(hit.chunk.text for hit in hits)
        context_sentences = split_sentences(context)
        answer_sentences = split_sentences(answer.text)
        q, expected, generated = self.embedder.embed([question.text, question.expected, answer.text or " "])
        c = self.embedder.embed(context_sentences)
        a = self.embedder.embed(answer_sentences)

        relevant = int(np.sum(c @ q >= self.relevance_threshold)) if len(c) else 0
        similarity = float(generated @ expected) if answer.text.strip() else 0.0
        supported = [
            s in context or (len(c) > 0 and float(np.max(c @ v)) >= self.support_threshold)
            for s, v in zip(answer_sentences, a)
        ]
        unsupported = len(supported) - sum(supported)
        reasoning = (
            f"{relevant} of {len(context_sentences)} retrieved sentences relate to the question "
            f"(cosine >= {self.relevance_threshold}); generated vs expected answer cosine {similarity:.2f}; "
            + (f"{sum(supported)} of {len(supported)} answer sentences supported by the context "
               f"(cosine >= {self.support_threshold} or verbatim)" if supported else "empty answer")
            + (f"; {unsupported} unsupported: hallucination" if unsupported else "")
        )
        scores = {
            "context_relevance": to_scale(relevant / len(context_sentences) if context_sentences else 0.0),
            "answer_similarity": to_scale(similarity),
            "faithfulness": to_scale(sum(supported) / len(supported) if supported else 1.0),
            "claim_hallucination_rate": round(unsupported / len(supported), 4) if supported else 0.0,
            "conciseness_offline": round(conciseness_offline(answer.text), 4),
            "coherence_offline": round(coherence_offline(a), 4),
        }
        return Judgement(self.name, scores, hallucination=unsupported > 0, reasoning=reasoning)
