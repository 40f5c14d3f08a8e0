"""The offline judge: the single-call judge's metrics by embedding similarity, without an LLM."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from ragexp.judges import short_answers
from ragexp.errors import QuestionFailed
from ragexp.judges.contract import Judge, Run
from ragexp.metrics.generation import abstains, abstention_sentence, coherence_offline, conciseness_offline, token_recall
from ragexp.base.text import split_sentences, words
from ragexp.types import Answer, Hit, Judgement, Question, QuestionResult
from ragexp.base.settings import Cosine, Fraction, NonNegativeInt


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def numbers(text: str) -> set[str]:
    """The numbers a text states ("7400", "2.1", "1,000"), as written."""
    return set(_NUMBER.findall(text))


_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'-]*\w")  # a name ends in a letter or digit: Quarry0, GPT-4o, S3


def anchors(text: str) -> set[str]:
    """What a claim must not get wrong: its numbers and its names (capitalised words after the
    first word), names lower-cased."""
    return numbers(text) | {n.lower() for n in _NAME.findall(text.strip())}


def states(passage: str, claim_anchors: set[str]) -> bool:
    """The passage states every number and name of a claim (see `anchors`)."""
    return claim_anchors <= numbers(passage) | {w.lower() for w in re.findall(r"[\w'-]+", passage)}


def longest_piece(text: str, i: int, passage: str) -> int:
    """Length of the longest piece of `text` from `i` found verbatim in `passage` (binary search:
    a piece found implies its prefixes are)."""
    low, high = 0, len(text) - i
    while low < high:
        middle = (low + high + 1) // 2
        if text[i : i + middle] in passage:
            low = middle
        else:
            high = middle - 1
    return low


def pieced_from(text: str, passage: str, sentences: Sequence[str], min_piece: int) -> bool:
    """`text` is made of pieces of `passage`, each at least `min_piece` characters long (or the
    rest of the text) or a whole sentence of the passage (a heading such as "Limits.")."""
    i = 0
    while i < len(text):
        if text[i] == " ":
            i += 1
            continue
        low = longest_piece(text, i, passage)
        if low < min(min_piece, len(text) - i):
            low = max((len(s) for s in sentences if text.startswith(s, i)), default=0)
            if not low:
                return False
        i += low
    return True


def whole_sentences(text: str, sentences: Sequence[str]) -> bool:
    """`text` is context sentences joined whole (from any passages), the last one possibly cut
    short: what the extractive generator writes when it joins fragments the splitter reads as one."""
    i = 0
    while i < len(text):
        if text[i] == " ":
            i += 1
            continue
        step = max((len(s) for s in sentences if text.startswith(s, i)), default=0)
        if not step:
            return any(s.startswith(text[i:]) for s in sentences)
        i += step
    return True


def verbatim(sentence: str, passages: Sequence[str], passage_sentences: Sequence[Sequence[str]] = (),
             min_piece: int = 12) -> bool:
    """True when `sentence` is context text (whitespace normalised in all): made of pieces of ONE
    passage, each at least `min_piece` characters long or a whole sentence of it, stating no number
    that passage lacks; or whole context sentences joined (an extractive answer whose fragments the
    splitter reads as one sentence). A sentence stitched from fragments of different passages
    ("The Quarry server listens on port" + "9000" of another server) is not verbatim."""
    text = " ".join(sentence.split())
    if not text:
        return True
    flat = [" ".join(p.split()) for p in passages]
    split = [[" ".join(s.split()) for s in ss] for ss in passage_sentences] or [split_sentences(p) for p in flat]
    stated = numbers(text)
    if any(stated <= numbers(p) and pieced_from(text, p, ss, min_piece) for p, ss in zip(flat, split)):
        return True
    return whole_sentences(text, [s for ss in split for s in ss])


@dataclass(frozen=True)
class ClaimEvidence:
    """What the context holds for one claim: verbatim text (see `verbatim`); the best cosine with a
    context sentence whose passage states the claim's numbers and names (-1: no such passage); the
    best share of the claim's content words in one such passage; for a short answer, whether the
    context states it read with its question (ragexp.judges.short_answers; None: not read so)."""

    verbatim: bool
    cosine: float
    overlap: float
    in_question: bool | None = None


@dataclass(frozen=True)
class Verdict:
    """A judge's reading of the claims' evidence: faithfulness (1-10), the hallucination flag, the
    words the reasoning gives for it (after the count of unsupported claims), and any scores of its own."""

    faithfulness: float
    hallucination: bool
    words: str
    scores: dict[str, float] = field(default_factory=dict)


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
    - faithfulness = 1 + 9 * (share of the answer's claims supported by the context, see `supports`):
      the claims are its sentences but those saying it does not know (metrics.generation.
      abstention_sentence); an answer without a claim scores 10; a short answer (one claim of at
      most `short_answer_words` words, "Port 7070.") is read with its question (see
      `in_its_question`);
    - hallucination = more than `hallucination_share` of the claims unsupported, or (with
      `answered_unanswerable_hallucinates`) the question is unanswerable and the answer does not
      abstain (metrics.generation.abstains). For an unanswerable question abstaining is the right
      answer (answer_similarity 10; answering anyway: 1);
    - claim_hallucination_rate = unsupported answer sentences / answer sentences (0-1; the
      specification's hallucination rate with sentences as claims);
    - conciseness_offline, coherence_offline: see ragexp.metrics.generation (0-1 estimates).
    """

    metrics: tuple[str, ...] = ("context_relevance", "answer_similarity", "faithfulness",
                                "claim_hallucination_rate", "conciseness_offline", "coherence_offline")
    scales = {"context_relevance": (1.0, 10.0), "answer_similarity": (1.0, 10.0), "faithfulness": (1.0, 10.0),
              "claim_hallucination_rate": (0.0, 1.0), "conciseness_offline": (0.0, 1.0), "coherence_offline": (0.0, 1.0)}
    scorecard = {"faithfulness": "faithfulness", "conciseness": "conciseness_offline", "coherence": "coherence_offline"}
    needs_reference = ("answer_similarity",)
    needs_contexts = ("context_relevance", "faithfulness", "claim_hallucination_rate")
    # its hallucination verdict is claim_hallucination_rate > hallucination_share: calibrate --outputs fits the share
    verdict_settings = {"hallucination": ("claim_hallucination_rate", "hallucination_share")}

    def __init__(self, embedder, relevance_threshold: Cosine = 0.35, support_threshold: Cosine = 0.8,
                 name: str | None = None, answered_unanswerable_hallucinates: bool = True,
                 overlap_threshold: Fraction | None = None, hallucination_share: Fraction = 0.0,
                 short_answer_words: NonNegativeInt = 12, short_answer_share: Fraction = 0.7,
                 question_fit_margin: Fraction = 0.35):
        self.embedder = embedder
        self.short_answer_words, self.short_answer_share = short_answer_words, short_answer_share
        self.question_fit_margin = question_fit_margin
        self.answered_unanswerable_hallucinates = answered_unanswerable_hallucinates
        self.relevance_threshold, self.support_threshold = relevance_threshold, support_threshold
        self.overlap_threshold, self.hallucination_share = overlap_threshold, hallucination_share
        self.name = name or f"offline-{embedder.name}"

    def evidence(self, sentence: str, vector: np.ndarray, passages: Sequence[str], sentences: Sequence[Sequence[str]],
                 c: np.ndarray, owner: np.ndarray) -> ClaimEvidence:
        """What the context holds for one claim (thresholds apply in `supports`)."""
        stated = anchors(sentence)
        stating = [states(p, stated) for p in passages]
        cosine = max((float(x) for x, p in zip(c @ vector, owner) if stating[p]), default=-1.0) if len(c) else -1.0
        claim = set(words(sentence))
        overlap = max((len(claim & set(words(p))) / len(claim) for p, ok in zip(passages, stating) if ok),
                      default=0.0) if claim else 0.0
        return ClaimEvidence(verbatim(sentence, passages, sentences), cosine, overlap)

    def in_its_question(self, question: str, evidence: list[tuple[str, ClaimEvidence]], passages: Sequence[str],
                        sentences: Sequence[Sequence[str]], c: np.ndarray) -> list[tuple[str, ClaimEvidence]]:
        """A short answer's one claim read with its question (ragexp.judges.short_answers): supported
        when a context sentence about the question (within `question_fit_margin` of cosine of the
        closest one), in a passage stating the answer's names and numbers, states what the answer adds
        to the question (every number, more than `short_answer_share` of the words). Other answers,
        and a short one that is context text verbatim, as they are."""
        if len(evidence) != 1 or evidence[0][1].verbatim:  # context text is supported as it stands
            return evidence
        [(claim, found)] = evidence
        new = short_answers.said(question, claim, self.short_answer_words)
        if not new:
            return evidence
        context_sentences = [s for ss in sentences for s in ss]
        if not context_sentences:
            return [(claim, replace(found, in_question=False))]
        [v] = self.embedder.embed([f"{question} {claim}"])
        stated = anchors(claim)
        eligible = [short_answers.states(p, stated) for p, ss in zip(passages, sentences) for _ in ss]
        reading = short_answers.supported(new, context_sentences, eligible, c @ v, self.short_answer_share,
                                          self.question_fit_margin)
        return [(claim, replace(found, in_question=reading))]

    def judge_all(self, items: Sequence[QuestionResult], run: Run) -> list[Judgement | QuestionFailed]:
        """Every answered question judged (`run.each`), after the texts of those the stage cache does
        not hold are embedded in one call (`texts_to_embed`): in batches of sentences of like length
        across questions, where judging question by question embeds a few dozen sentences at a time
        (1.6x slower with MiniLM on 2 cores: bench group cheap_judge). The vectors wait in the run's
        embedding cache, where `judge` finds them; the judgements are the same."""
        texts = dict.fromkeys(text for r in run.uncached(self, items)
                              for text in self.texts_to_embed(r.question, r.hits, r.answer))  # type: ignore[arg-type]
        if texts:
            self.embedder.embed(list(texts))
        return run.each(self, items)

    def texts_to_embed(self, question: Question, hits: Sequence[Hit], answer: Answer) -> list[str]:
        """What `judge` embeds for this answer (`judge_all` embeds it for many answers at once): the
        question, the context's and the answer's sentences, and a short answer said with its question."""
        answer_sentences = split_sentences(answer.text)
        with_question = [f"{question.text} {s}" for s in answer_sentences[:1] if len(answer_sentences) == 1
                         and short_answers.said(question.text, s, self.short_answer_words)]
        return [question.text, *(s for hit in hits for s in split_sentences(hit.chunk.text)), *answer_sentences,
                *with_question]

    def supports(self, evidence: ClaimEvidence) -> bool:
        """A short answer read with its question is supported as that reading says (see
        `in_its_question`); another claim when it is verbatim context text (see `verbatim`); or a context
        sentence has a cosine of at least `support_threshold` with it and its passage states every
        number and name the claim states (see `anchors`); or (with `overlap_threshold`) one passage
        stating them holds that share of the claim's content words."""
        if evidence.in_question is not None:
            return evidence.in_question
        return (evidence.verbatim or evidence.cosine >= self.support_threshold
                or (self.overlap_threshold is not None and evidence.overlap >= self.overlap_threshold))

    def hallucinates(self, supported: Sequence[bool]) -> bool:
        """More than `hallucination_share` of the claims unsupported (0: any)."""
        return bool(supported) and len(supported) - sum(supported) > self.hallucination_share * len(supported)

    def claims(self, question: Question, hits: Sequence[Hit], answer: Answer) -> list[tuple[str, ClaimEvidence]]:
        """The answer's claims (its sentences but those saying it does not know) and their evidence (a
        short answer's read with its question)."""
        passages = [hit.chunk.text for hit in hits]
        sentences = [split_sentences(p) for p in passages]
        answer_sentences = split_sentences(answer.text)
        c = self.embedder.embed([s for ss in sentences for s in ss])
        evidence = self.claim_evidence(answer_sentences, self.embedder.embed(answer_sentences), passages, sentences, c)
        return self.in_its_question(question.text, evidence, passages, sentences, c)

    def claim_evidence(self, answer_sentences: Sequence[str], a: np.ndarray, passages: Sequence[str],
                       sentences: Sequence[Sequence[str]], c: np.ndarray) -> list[tuple[str, ClaimEvidence]]:
        owner = np.array([n for n, ss in enumerate(sentences) for _ in ss], dtype=int)  # context sentence -> passage
        return [(s, self.evidence(s, v, passages, sentences, c, owner))
                for s, v in zip(answer_sentences, a) if not abstention_sentence(s)]

    def judge(self, question: Question, hits: Sequence[Hit], answer: Answer) -> Judgement:
        passages = [hit.chunk.text for hit in hits]
        sentences = [split_sentences(p) for p in passages]
        context_sentences = [s for ss in sentences for s in ss]
        answer_sentences = split_sentences(answer.text)
        [q] = self.embedder.embed([question.text])
        c = self.embedder.embed(context_sentences)
        a = self.embedder.embed(answer_sentences)
        relevant = int(np.sum(c @ q >= self.relevance_threshold)) if len(c) else 0
        abstained = abstains(answer.text)
        if question.answerable and question.answers:
            recall = token_recall(answer.text, question.answers)
            expected = f"the answer holds {recall:.0%} of the expected answer's words"
        elif question.answerable:  # no reference: the scores that need one are left out of the run
            recall = 0.0
            expected = "no expected answer to compare it with"
        else:  # the corpus holds no answer: abstaining is the right answer
            recall = 1.0 if abstained else 0.0
            expected = "an unanswerable question, " + ("rightly abstained" if abstained else "answered anyway")
        # a sentence saying the answer is not known makes no claim; every other sentence is checked
        evidence = self.in_its_question(question.text, self.claim_evidence(answer_sentences, a, passages, sentences, c),
                                        passages, sentences, c)
        supported = [self.supports(e) for _, e in evidence]
        unsupported = len(supported) - sum(supported)
        verdict = self.verdict(evidence, supported, answer.text, answer_sentences, a, c, passages)
        answered_unanswerable = not question.answerable and not abstained and self.answered_unanswerable_hallucinates
        reasoning = (
            f"{relevant} of {len(context_sentences)} retrieved sentences relate to the question "
            f"(cosine >= {self.relevance_threshold}); {expected}; {self.support_words(evidence, supported, abstained)}"
            + (f"; {unsupported} unsupported" if unsupported else "") + verdict.words
            + ("; a confident answer to an unanswerable question: hallucination" if answered_unanswerable else "")
        )
        scores = {
            "context_relevance": to_scale(relevant / len(context_sentences) if context_sentences else 0.0),
            "answer_similarity": to_scale(recall),
            "faithfulness": verdict.faithfulness,
            "claim_hallucination_rate": round(unsupported / len(supported), 4) if supported else 0.0,
            "conciseness_offline": round(conciseness_offline(answer.text), 4),
            "coherence_offline": round(coherence_offline(a), 4),
            **verdict.scores,
        }
        return Judgement(self.name, scores, hallucination=verdict.hallucination or answered_unanswerable,
                         reasoning=reasoning)

    def support_words(self, evidence: Sequence[tuple[str, ClaimEvidence]], supported: Sequence[bool],
                      abstained: bool) -> str:
        """What the reasoning says of the claims' support."""
        if not supported:
            return "the answer abstains" if abstained else "empty answer"
        if evidence[0][1].in_question is not None:
            return "a short answer read with its question: " + (
                "a context sentence about the question states it" if supported[0] else
                "no context sentence about the question states it")
        return (f"{sum(supported)} of {len(supported)} answer sentences supported by the context "
                f"(verbatim, cosine >= {self.support_threshold}"
                + (f", or {self.overlap_threshold:.0%} of the content words" if self.overlap_threshold is not None else "")
                + ")")

    def verdict(self, evidence: Sequence[tuple[str, ClaimEvidence]], supported: Sequence[bool], answer: str,
                answer_sentences: Sequence[str], a: np.ndarray, c: np.ndarray, passages: Sequence[str]) -> Verdict:
        """Faithfulness and the hallucination flag from the claims' evidence: the rule (the share of
        supported claims; a hallucination past `hallucination_share` unsupported)."""
        hallucinated = self.hallucinates(supported)
        rule = f"more than {self.hallucination_share:.0%} unsupported" if self.hallucination_share else "any unsupported"
        return Verdict(to_scale(sum(supported) / len(supported) if supported else 1.0), hallucinated,
                       f": hallucination ({rule})" if hallucinated else "")
