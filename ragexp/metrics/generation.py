"""Generation metrics that need no LLM.

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

from ragexp.base.text import STOPWORDS, split_sentences

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


_SOURCE = (r"(the |these |this |those |provided |given |retrieved |available |above |following |supplied )*"
           r"(context|documents?|docs|passages?|sources?|texts?|articles?|excerpts?|manual|search results?|information)")
# One sentence that says the reply does not know, or that the documents do not hold the answer. The
# negative phrase must be about knowing or about the documents: "X does not provide a GUI" is a claim.
ABSTENTION_SENTENCE = re.compile(
    r"\b(i|we) (do not|don't|dont|did not|didn't|cannot|can't|can not|could not|couldn't|am unable to|are unable to"
    r"|am not able to|have no|lack|do not have|don't have) (know|answer|determine|find|tell|say|be sure|confirm"
    r"|provide (an|a|the|any) (answer|information)|enough|sufficient|information|access)"
    r"|\bi('m| am) (not sure|not certain)|\b(not|no) (enough|sufficient) (information|context|details|data)"
    r"|\binsufficient (information|context|details|data)"
    r"|\b(there is|there's|there are|there was) (no|not any) (relevant |specific |such |direct |explicit )?"
    r"(information|mention|data|details|answer|indication)"
    r"|^\W*no (relevant |specific )?information\b"
    rf"|\b{_SOURCE}\b[^.!?]{{0,60}}?\b(do|does|did) not (contain|mention|say|provide|state|specify|include|give|discuss"
    r"|address|answer|describe|cover|hold|list)"
    rf"|\b(is|are|was|were) not (mentioned|provided|stated|given|specified|available|discussed|described|listed)"
    rf" (in|by|within|from) {_SOURCE}|\b(is|are|was|were) not (mentioned|stated|specified)\s*[.!?]*$"
    r"|\b(cannot|can't|can not|could not|couldn't) be (answered|determined|found|inferred|confirmed|established)"
    r"|\bunknown\s*[.!?]*$|^\W*(no answer|not known|unanswerable)\W*$", re.IGNORECASE)


def abstention_sentence(sentence: str) -> bool:
    """A sentence that says the reply does not know, or that the documents do not hold the answer
    ("I don't know.", "The documents do not mention the mascot.", "There is not enough information
    to answer."); a negative claim about the subject ("Quarry does not provide a GUI.") is not one."""
    return bool(ABSTENTION_SENTENCE.search(sentence))


def abstains(answer: str) -> bool:
    """An answer whose point is not knowing: empty, or its first sentence is an abstention sentence
    (see `abstention_sentence`) and so are at least half of its sentences. One definition for the
    run's abstention metrics, the offline judge and the extractive generator's "I don't know.".
    The offline judge checks an answer's other sentences whatever this says."""
    sentences = split_sentences(answer)
    if not sentences:
        return True
    said = [abstention_sentence(s) for s in sentences]
    return said[0] and 2 * sum(said) >= len(said)


def abstention_scores(answer: str, answerable: bool, labelled: bool = True) -> dict[str, float]:
    """Per answered question: `abstention` (1 when it abstains); for a question the corpus cannot
    answer, `abstention_recall` (1 when it abstains) and `answered_unanswerable` (1 when it answers
    anyway: a confident answer to an unanswerable question); for an abstaining answer,
    `abstention_precision` (1 when the question was unanswerable), only when the questions are
    `labelled` (some marked unanswerable: without such labels an abstention is neither right nor
    wrong, and a precision of 0 would say it was wrong). Their means are the run's abstention rate,
    abstention recall, answered-unanswerable rate and abstention precision."""
    abstained = abstains(answer)
    scores = {"abstention": float(abstained)}
    if not answerable:
        scores.update(abstention_recall=float(abstained), answered_unanswerable=float(not abstained))
    if abstained and labelled:
        scores["abstention_precision"] = float(not answerable)
    return scores


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
