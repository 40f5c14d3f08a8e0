"""judge=offline_learned: the offline judge whose faithfulness and hallucination flag come from a
small learned verifier (ragexp.judges.verifier) instead of a fixed rule; no LLM, no download."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ragexp.judges.offline import ClaimEvidence, EmbeddingOfflineJudge, Verdict, to_scale
from ragexp.judges.verifier import SHIPPED, ContextIndex, Verifier, answer_features, claim_signals
from ragexp.base.text import split_sentences
from ragexp.base.settings import Cosine, Fraction, NonNegativeInt


def verifier_features(judge: EmbeddingOfflineJudge, passages: Sequence[str], sentences: Sequence[Sequence[str]], answer: str,
                      c: np.ndarray, a: np.ndarray) -> dict[str, float]:
    """The verifier's features of `answer` (`a`: its sentences' vectors, `c`: the context sentences'),
    from the offline judge's evidence for each of its claims (the bench fits the verifier on these)."""
    answer_sentences = split_sentences(answer)
    return features_of(judge.claim_evidence(answer_sentences, a, passages, sentences, c), answer, answer_sentences,
                       a, c, passages)


def features_of(evidence: Sequence[tuple[str, ClaimEvidence]], answer: str, answer_sentences: Sequence[str],
                a: np.ndarray, c: np.ndarray, passages: Sequence[str]) -> dict[str, float]:
    """The verifier's features from the claims' evidence already found (see verifier_features)."""
    index = ContextIndex.of(passages)
    vectors = dict(zip(answer_sentences, a))
    return answer_features([claim_signals(s, vectors[s], e, c, index) for s, e in evidence], answer)


class LearnedOfflineJudge(EmbeddingOfflineJudge):
    """The offline judge (context_relevance, answer_similarity, claim_hallucination_rate, ... as
    there), but:

    - hallucination_probability = the verifier's probability that people would not judge the answer
      fully supported by the context, from what its claims find there (ragexp.judges.verifier:
      cosines with MiniLM, shares of content words, word pairs, numbers and names found, ...);
    - faithfulness = 1 + 9 * (1 - hallucination_probability);
    - hallucination = hallucination_probability above `hallucination_threshold` (null: the one
      chosen with the weights, on the tuning part), or an answered unanswerable question (as the
      offline judge);
    - a short answer is read with its question as by the offline judge: its claim has the signals of
      verbatim text when a context sentence about the question states it, none when none does.

    `weights` is the model file (plain JSON; null: the one shipped in the package, fitted with
    MiniLM as the scoring embedder: another embedder gives other cosines, so refit for it).
    """

    metrics: tuple[str, ...] = EmbeddingOfflineJudge.metrics + ("hallucination_probability",)
    scales = {**EmbeddingOfflineJudge.scales, "hallucination_probability": (0.0, 1.0)}
    verdict_settings = {"hallucination": ("hallucination_probability", "hallucination_threshold")}

    def __init__(self, embedder, weights: str | None, hallucination_threshold: Fraction | None,
                 relevance_threshold: Cosine, support_threshold: Cosine, name: str | None,
                 answered_unanswerable_hallucinates: bool, short_answer_words: NonNegativeInt,
                 short_answer_share: Fraction, question_fit_margin: Fraction):
        super().__init__(embedder, relevance_threshold=relevance_threshold, support_threshold=support_threshold,
                         name=name or f"offline-learned-{embedder.name}",
                         answered_unanswerable_hallucinates=answered_unanswerable_hallucinates, hallucination_share=0.0,
                         short_answer_words=short_answer_words, short_answer_share=short_answer_share,
                         question_fit_margin=question_fit_margin)
        self.verifier = Verifier.load(Path(weights) if weights else SHIPPED)
        self.hallucination_threshold = (self.verifier.threshold if hallucination_threshold is None
                                        else hallucination_threshold)

    @classmethod
    def constraints(cls, weights: str | None = None, **_) -> list[str]:
        """The weights file exists and is a verifier model (checked with the config, before any work)."""
        from ragexp.errors import RagexpError

        try:
            Verifier.load(Path(weights) if weights else SHIPPED, setting="weights")
        except RagexpError as err:
            return [str(err)]
        return []

    @classmethod
    def cache_token(cls, weights: str | None = None, **_) -> str:
        """The weights file's content (a refit at the same path is a cache miss, see ragexp.store.code_identity)."""
        import hashlib

        path = Path(weights) if weights else SHIPPED
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"

    def verdict(self, evidence: Sequence[tuple[str, ClaimEvidence]], supported: Sequence[bool], answer: str,
                answer_sentences: Sequence[str], a: np.ndarray, c: np.ndarray, passages: Sequence[str]) -> Verdict:
        """The verifier's: faithfulness 1 + 9 (1 - p), a hallucination when p is above the threshold."""
        p = self.verifier.probability(features_of(evidence, answer, answer_sentences, a, c, passages))
        flagged = p > self.hallucination_threshold
        words = f"; verifier: {p:.0%} likely not supported" + (
            f" (above {self.hallucination_threshold:.0%}): hallucination" if flagged else "")
        return Verdict(to_scale(1.0 - p), flagged, words, {"hallucination_probability": round(p, 4)})
