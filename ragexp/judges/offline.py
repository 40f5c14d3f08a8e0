"""The offline judge: the specification's single-call metrics by embedding similarity, without an LLM."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ragexp.judges.contract import Judge
from ragexp.metrics.generation import abstains, coherence_offline, conciseness_offline, token_recall
from ragexp.text import split_sentences
from ragexp.types import Answer, Hit, Judgement, Question
from ragexp.validation import Cosine


def verbatim(sentence: str, context: str, context_sentences: Sequence[str] = (), min_piece: int = 12) -> bool:
    """True when `sentence` is made of pieces of the context, each found there verbatim (whitespace
    normalised in all) and at least `min_piece` characters long, or a whole context sentence (a
    heading such as "Limits."). An extractive answer, context fragments joined, is verbatim even
    where the sentence splitter sees one sentence across two fragments."""
    text, i = " ".join(sentence.split()), 0
    whole = {" ".join(s.split()) for s in context_sentences}
    while i < len(text):
        if text[i] == " ":
            i += 1
            continue
        low, high = 0, len(text) - i  # the longest piece from i found in the context (monotone: binary search)
        while low < high:
            middle = (low + high + 1) // 2
            if text[i : i + middle] in context:
                low = middle
            else:
                high = middle - 1
        if low < min(min_piece, len(text) - i):
            low = max((len(s) for s in whole if text.startswith(s, i)), default=0)
            if not low:
                return False
        i += low
    return True


def to_scale(share: float) -> float:
    """A share in [0, 1] mapped linearly onto the 1-10 scale (0 -> 1, 1 -> 10)."""
    return round(1.0 + 9.0 * float(np.clip(share, 0.0, 1.0)), 3)


class OfflineJudge(Judge):
    """Scores without an LLM, by embedding similarity (labelled `offline-<embedder>` everywhere):

    - context_relevance = 1 + 9 * (share of retrieved sentences whose cosine with the question
      is at least `relevance_threshold`);
    - answer_similarity = 1 + 9 * (share of the expected answer's words the generated answer holds,
      SQuAD-normalised, the best over the expected answers): lexical, unlike the embedding cosine
      of the `correctness` metric (ragexp.metrics);
    - faithfulness = 1 + 9 * (share of answer sentences supported by the context: made of context
      text verbatim (see `verbatim`), or with a cosine of at least `support_threshold` with some
      context sentence);
    - hallucination = some answer sentence is supported by no context sentence, or (with
      `answered_unanswerable_hallucinates`) the question is unanswerable and the answer does not
      abstain. An abstaining answer ("I don't know", see metrics.generation.abstains) makes no
      claim (faithfulness 10); for an unanswerable question it is the right answer
      (answer_similarity 10; answering anyway: 1);
    - claim_hallucination_rate = unsupported answer sentences / answer sentences (0-1; the
      specification's hallucination rate with sentences as claims);
    - conciseness_offline, coherence_offline: see ragexp.metrics.generation (0-1 estimates).
    """

    metrics = ("context_relevance", "answer_similarity", "faithfulness",
               "claim_hallucination_rate", "conciseness_offline", "coherence_offline")
    scales = {"context_relevance": (1.0, 10.0), "answer_similarity": (1.0, 10.0), "faithfulness": (1.0, 10.0),
              "claim_hallucination_rate": (0.0, 1.0), "conciseness_offline": (0.0, 1.0), "coherence_offline": (0.0, 1.0)}
    scorecard = {"faithfulness": "faithfulness", "conciseness": "conciseness_offline", "coherence": "coherence_offline"}
    needs_reference = ("answer_similarity",)

    def __init__(self, embedder, relevance_threshold: Cosine = 0.35, support_threshold: Cosine = 0.8,
                 name: str | None = None, answered_unanswerable_hallucinates: bool = True):
        self.embedder = embedder
        self.answered_unanswerable_hallucinates = answered_unanswerable_hallucinates
        self.relevance_threshold, self.support_threshold = relevance_threshold, support_threshold
        self.name = name or f"offline-{embedder.name}"

    def judge(self, question: Question, hits: Sequence[Hit], answer: Answer) -> Judgement:
        context = " ".join(hit.chunk.text for hit in hits)
        context_sentences = split_sentences(context)
        answer_sentences = split_sentences(answer.text)
        [q] = self.embedder.embed([question.text])
        c = self.embedder.embed(context_sentences)
        a = self.embedder.embed(answer_sentences)

        relevant = int(np.sum(c @ q >= self.relevance_threshold)) if len(c) else 0
        abstained = abstains(answer.text)
        if question.answerable:
            recall = token_recall(answer.text, question.answers)
            expected = f"the answer holds {recall:.0%} of the expected answer's words"
        else:  # the corpus holds no answer: abstaining is the right answer
            recall = 1.0 if abstained else 0.0
            expected = "an unanswerable question, " + ("rightly abstained" if abstained else "answered anyway")
        flat_context = " ".join(context.split())
        claims = [] if abstained else list(zip(answer_sentences, a))  # an abstention makes no claim
        supported = [
            verbatim(s, flat_context, context_sentences) or (len(c) > 0 and float(np.max(c @ v)) >= self.support_threshold)
            for s, v in claims
        ]
        unsupported = len(supported) - sum(supported)
        answered_unanswerable = not question.answerable and not abstained and self.answered_unanswerable_hallucinates
        reasoning = (
            f"{relevant} of {len(context_sentences)} retrieved sentences relate to the question "
            f"(cosine >= {self.relevance_threshold}); {expected}; "
            + (f"{sum(supported)} of {len(supported)} answer sentences supported by the context "
               f"(cosine >= {self.support_threshold} or verbatim)" if supported
               else "the answer abstains" if abstained else "empty answer")
            + (f"; {unsupported} unsupported: hallucination" if unsupported else "")
            + ("; a confident answer to an unanswerable question: hallucination" if answered_unanswerable else "")
        )
        scores = {
            "context_relevance": to_scale(relevant / len(context_sentences) if context_sentences else 0.0),
            "answer_similarity": to_scale(recall),
            "faithfulness": to_scale(sum(supported) / len(supported) if supported else 1.0),
            "claim_hallucination_rate": round(unsupported / len(supported), 4) if supported else 0.0,
            "conciseness_offline": round(conciseness_offline(answer.text), 4),
            "coherence_offline": round(coherence_offline(a), 4),
        }
        return Judgement(self.name, scores, hallucination=unsupported > 0 or answered_unanswerable, reasoning=reasoning)
