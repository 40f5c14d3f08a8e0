"""Generation metrics of the specification (section 6.4) that need no LLM.

- Correctness against the expected answer: SQuAD's exact match and token F1 (the official
  v1.1/v2.0 normalisation: lower case, no punctuation, no articles a/an/the, single spaces;
  the best over the expected answers), and the embedding cosine (in `MetricSet`).
- Offline estimates of conciseness and coherence, for judges without an LLM, named
  `conciseness_offline` and `coherence_offline` so they are never mistaken for the LLM judge's
  `conciseness` and `coherence` (1-5 mapped to 0-1 as the specification does).
- The generation scorecard: faithfulness 0.5, correctness 0.3, conciseness 0.1, coherence 0.1
  with an expected answer; 0.6 / 0.2 / 0.2 without one (all on 0-1).
"""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Mapping, Sequence

import numpy as np

from ragexp.text import STOPWORDS

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_WORD = re.compile(r"\w+", re.UNICODE)

SCORECARD = {"faithfulness": 0.5, "correctness": 0.3, "conciseness": 0.1, "coherence": 0.1}
SCORECARD_NO_REFERENCE = {"faithfulness": 0.6, "conciseness": 0.2, "coherence": 0.2}


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised expected answer, else 0.0."""
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(a) for a in answers))


def token_f1(prediction: str, answers: Sequence[str]) -> float:
    """SQuAD's token F1 (bag of normalised tokens), the best over the expected answers."""
    predicted = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        expected = normalize_answer(answer).split()
        if not predicted or not expected:
            best = max(best, float(predicted == expected))
            continue
        common = sum((Counter(predicted) & Counter(expected)).values())
        if common:
            precision, recall = common / len(predicted), common / len(expected)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def token_recall(prediction: str, answers: Sequence[str]) -> float:
    """Share of an expected answer's normalised tokens (SQuAD normalisation, as a bag) that the
    prediction holds, the best over the expected answers: does the answer say what the reference
    says, whatever else it says (token F1 also penalises the rest). 0 without expected answers."""
    predicted = Counter(normalize_answer(prediction).split())
    best = 0.0
    for answer in answers:
        expected = Counter(normalize_answer(answer).split())
        if expected:
            best = max(best, sum((predicted & expected).values()) / sum(expected.values()))
    return best


def conciseness_offline(answer: str) -> float:
    """Distinct content words / all words (0-1): repetition and filler words lower it. An empty
    answer wastes no words: 1. A crude proxy of the specification's conciseness, not an LLM score."""
    tokens = _WORD.findall(answer.lower())
    if not tokens:
        return 1.0
    return len({t for t in tokens if t not in STOPWORDS}) / len(tokens)


def coherence_offline(sentence_vectors: np.ndarray) -> float:
    """Mean cosine similarity of consecutive answer sentences, clipped to 0-1 (topical
    continuity); an answer of one sentence or none is coherent: 1. Vectors are L2-normalised."""
    if len(sentence_vectors) < 2:
        return 1.0
    similarities = np.sum(sentence_vectors[:-1] * sentence_vectors[1:], axis=1)
    return float(np.clip(np.mean(similarities), 0.0, 1.0))


def scorecard(unit_scores: Mapping[str, float]) -> float | None:
    """The specification's generation score from 0-1 values of faithfulness, conciseness,
    coherence and (when there is an expected answer) correctness; None when one is missing."""
    weights = SCORECARD if "correctness" in unit_scores else SCORECARD_NO_REFERENCE
    if any(m not in unit_scores for m in weights):
        return None
    return sum(unit_scores[m] * w for m, w in weights.items())
