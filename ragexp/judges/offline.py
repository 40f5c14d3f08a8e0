"""The offline judges: the single-call judge's metrics without an LLM, by the words the answer shares with its
context (`OfflineJudge`, judge=offline) or by embedding similarity (`EmbeddingOfflineJudge`, the base of
judge=offline_learned)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from ragexp.judges import short_answers
from ragexp.errors import QuestionFailed
from ragexp.judges.contract import Judge, Run
from ragexp.metrics.generation import abstains, abstention_sentence, coherence_offline, conciseness_offline, token_recall
from ragexp.base.text import STOPWORDS, split_sentences, words
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


def answer_recall(question: Question, answer: str, abstained: bool) -> tuple[float, str]:
    """The share of the expected answer's words the answer holds, and its words for the reasoning; for
    an unanswerable question, 1 when the answer abstains (the right answer), else 0."""
    if question.answerable and question.answers:
        recall = token_recall(answer, question.answers)
        return recall, f"the answer holds {recall:.0%} of the expected answer's words"
    if question.answerable:  # no reference: the scores that need one are left out of the run
        return 0.0, "no expected answer to compare it with"
    # the corpus holds no answer: abstaining is the right answer
    return (1.0 if abstained else 0.0), "an unanswerable question, " + ("rightly abstained" if abstained else "answered anyway")


def to_scale(share: float) -> float:
    """A share in [0, 1] mapped linearly onto the 1-10 scale (0 -> 1, 1 -> 10)."""
    return round(1.0 + 9.0 * float(np.clip(share, 0.0, 1.0)), 3)


class EmbeddingOfflineJudge(Judge):
    """The offline judge as it was before the word-based reading (`OfflineJudge`), kept as the base
    of judge=offline_learned, whose verifier was fitted on this evidence: scores without an LLM, by
    embedding similarity (labelled `offline-<embedder>` everywhere):

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

    def __init__(self, embedder, relevance_threshold: Cosine, support_threshold: Cosine,
                 name: str | None, answered_unanswerable_hallucinates: bool,
                 short_answer_words: NonNegativeInt, short_answer_share: Fraction,
                 question_fit_margin: Fraction, overlap_threshold: Fraction | None = None, hallucination_share: Fraction = 0.0):
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
        recall, expected = answer_recall(question, answer.text, abstained)
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


_WORD = re.compile(r"[a-z0-9]+")
NEGATIONS = frozenset("not no never nor none nobody nothing neither nowhere without cannot".split())


def word_list(text: str) -> list[str]:
    """The lower-cased `[a-z0-9]+` words of a text, in order, repeats kept ("don't": "don", "t")."""
    return _WORD.findall(text.lower())


def negated(text: str) -> bool:
    """The text says "not" in some way ("not", "never", "no", "isn't", "without", ...)."""
    return bool(NEGATIONS.intersection(_WORD.findall(text.lower().replace("n't", " not"))))


def name_words(text: str) -> set[str]:
    """The words of a claim's names (capitalised words after the first, see `anchors`), lower-cased."""
    return {w for name in _NAME.findall(text.strip()) for w in word_list(name)}


def number_words(text: str) -> set[str]:
    """The numbers a text states, as short_answers.token reads them ("1,000": "1000", "23rd": "23")."""
    return {short_answers.token(n) for n in numbers(text)}


@dataclass(frozen=True)
class ContextWords:
    """The context as the word-based reading sees it, read once per answer: its passages' words, word
    pairs (adjacent words of one passage), numbers and names' words, and its sentences with their
    content words and whether they say "not"."""

    passages: tuple[str, ...]
    sentences: tuple[tuple[str, ...], ...]  # per passage
    words: frozenset[str]
    pairs: frozenset[tuple[str, str]]
    passage_anchors: tuple[frozenset[str], ...]  # per passage: its words and numbers (see states_anchors)
    content: tuple[frozenset[str], ...]  # per context sentence (all passages, in order)
    negated: tuple[bool, ...]

    @classmethod
    def of(cls, passages: Sequence[str]) -> ContextWords:
        sentences = tuple(tuple(split_sentences(p)) for p in passages)
        listed = [word_list(p) for p in passages]
        flat = [s for ss in sentences for s in ss]
        return cls(tuple(passages), sentences, frozenset(w for ws in listed for w in ws),
                   frozenset(pair for ws in listed for pair in zip(ws, ws[1:])),
                   tuple(frozenset(ws) | number_words(p) for ws, p in zip(listed, passages)),
                   tuple(frozenset(word_list(s)) - STOPWORDS for s in flat), tuple(negated(s) for s in flat))

    @property
    def flat_sentences(self) -> list[str]:
        return [s for ss in self.sentences for s in ss]


@dataclass(frozen=True)
class WordSupport:
    """What the context holds for one claim, by its words: how many words it has; the shares of its
    words and of its word pairs (adjacent words) found in the context (a one-word claim: its word); its
    numbers and names that the passage stating most of them lacks (see `OfflineJudge.word_support`);
    whether it says "not" where the context sentence sharing most of its content words does not (or the
    other way round); whether it is context text verbatim; and, for a short answer read with its
    question, whether the context states it so (None: not read so)."""

    words: int
    found: float  # share of its words found in the context (repeats counted, as overlap reads them)
    pairs: float
    missing_numbers: tuple[str, ...] = ()
    missing_names: tuple[str, ...] = ()
    negation_changed: bool = False
    verbatim: bool = False
    in_question: bool | None = None


class OfflineJudge(Judge):
    """Scores without an LLM, by the words the answer shares with its context (labelled
    `offline-<embedder>` everywhere; the embedder serves only where words do not decide):

    - context_relevance = 1 + 9 * (share of retrieved sentences that hold at least
      `relevance_threshold` of the question's content words, read as short_answers.tokens reads them);
    - answer_similarity = 1 + 9 * (share of the expected answer's words the generated answer holds,
      SQuAD-normalised, the best over the expected answers);
    - faithfulness = 1 + 9 * (the claims' support, their mean weighted by their words): the claims are
      the answer's sentences but those saying it does not know (metrics.generation.abstention_sentence).
      A claim's words found are `pair_weight` times the share of its word pairs found in the context
      plus the rest times the share of its words found (1 for context text verbatim, see `verbatim`);
      its support is that less `number_penalty` per number that no passage states with the claim's
      other numbers and names. An answer without a claim scores 10. A short answer (one claim of at
      most `short_answer_words` words, "Port 7070.", not answering an instruction such as "Summarise
      the document.") is read with its question (ragexp.judges.short_answers): support 1 or 0; the
      only reading that embeds, and only once the context is found to state the answer's words;
    - a claim is supported when it is context text verbatim, or its words found reach
      `support_threshold`, its passage states every number and name, and it says "not" as the context
      sentence closest to it in content words says it (both do or neither does); a short answer as its
      reading says. hallucination = more than `hallucination_share` of the claims unsupported, or
      (with `answered_unanswerable_hallucinates`) the question is unanswerable and the answer does not
      abstain (for an unanswerable question abstaining is the right answer: answer_similarity 10;
      answering anyway: 1);
    - claim_hallucination_rate = unsupported claims / claims (0-1);
    - conciseness_offline, coherence_offline: see ragexp.metrics.generation (0-1 estimates; coherence
      embeds the answer's sentences).
    """

    metrics = EmbeddingOfflineJudge.metrics
    scales = EmbeddingOfflineJudge.scales
    judge_all = EmbeddingOfflineJudge.judge_all  # its `texts_to_embed` embedded in one call, then each judged
    scorecard = EmbeddingOfflineJudge.scorecard
    needs_reference = EmbeddingOfflineJudge.needs_reference
    needs_contexts = EmbeddingOfflineJudge.needs_contexts
    # its hallucination verdict is claim_hallucination_rate > hallucination_share: calibrate --outputs fits the share
    verdict_settings = EmbeddingOfflineJudge.verdict_settings

    def __init__(self, embedder, relevance_threshold: Fraction, support_threshold: Fraction, pair_weight: Fraction,
                 number_penalty: Fraction,
                 hallucination_share: Fraction, short_answer_words: NonNegativeInt, short_answer_share: Fraction,
                 question_fit_margin: Fraction, answered_unanswerable_hallucinates: bool, name: str | None):
        self.embedder = embedder
        self.relevance_threshold, self.support_threshold = relevance_threshold, support_threshold
        self.pair_weight, self.number_penalty = pair_weight, number_penalty
        self.hallucination_share = hallucination_share
        self.short_answer_words, self.short_answer_share = short_answer_words, short_answer_share
        self.question_fit_margin = question_fit_margin
        self.answered_unanswerable_hallucinates = answered_unanswerable_hallucinates
        self.name = name or f"offline-{embedder.name}"

    def word_support(self, claim: str, context: ContextWords) -> WordSupport:
        """A claim's support by words (see `WordSupport`): its numbers and names are checked against the
        passage stating most of them, so "The Quarry server listens on port 9000" misses 9000 when only
        another server's passage states it."""
        listed = word_list(claim)
        pairs = list(zip(listed, listed[1:]))
        found = sum(w in context.words for w in listed) / len(listed) if listed else 1.0
        paired = sum(p in context.pairs for p in pairs) / len(pairs) if pairs else found
        if verbatim(claim, context.passages, context.sentences):
            return WordSupport(len(listed), 1.0, 1.0, verbatim=True)
        stated_numbers, stated_names = number_words(claim), name_words(claim) - number_words(claim)
        wanted = stated_numbers | stated_names
        best = max(context.passage_anchors, key=lambda words: len(wanted & words), default=frozenset())
        content = frozenset(listed) - STOPWORDS
        closest = max(range(len(context.content)), key=lambda i: len(content & context.content[i]), default=None)
        changed = closest is not None and bool(content & context.content[closest]) and negated(claim) != context.negated[closest]
        return WordSupport(len(listed), found, paired, tuple(sorted(stated_numbers - best)), tuple(sorted(stated_names - best)),
                           changed)

    def found(self, support: WordSupport) -> float:
        """What the context holds of a claim's words: `pair_weight` of the share of its word pairs found, the
        rest of the share of its words found."""
        return self.pair_weight * support.pairs + (1 - self.pair_weight) * support.found

    def score(self, support: WordSupport) -> float:
        """A claim's support in [0, 1] (see the class's faithfulness)."""
        if support.in_question is not None:
            return float(support.in_question)
        return float(np.clip(self.found(support) - self.number_penalty * len(support.missing_numbers), 0.0, 1.0))

    def supports(self, support: WordSupport) -> bool:
        """The claim is supported (see the class's docstring)."""
        if support.in_question is not None:
            return support.in_question
        return support.verbatim or (self.found(support) >= self.support_threshold and not support.missing_numbers
                                    and not support.missing_names and not support.negation_changed)

    def hallucinates(self, supported: Sequence[bool]) -> bool:
        """More than `hallucination_share` of the claims unsupported (0: any)."""
        return bool(supported) and len(supported) - sum(supported) > self.hallucination_share * len(supported)

    def short_reading(self, question: str, claims: Sequence[str], context: ContextWords) -> tuple[set[str], list[int]] | None:
        """For a short answer (one claim, see short_answers.said) that is not context text verbatim: what
        it adds to its question and the context sentences stating it (short_answers.stating; none: the
        context does not state it). None for other answers."""
        if len(claims) != 1:
            return None
        new = short_answers.said(question, claims[0], self.short_answer_words)
        if not new or verbatim(claims[0], context.passages, context.sentences):
            return None
        stated = anchors(claims[0])
        eligible = [short_answers.states(p, stated) for p, ss in zip(context.passages, context.sentences) for _ in ss]
        return new, short_answers.stating(new, context.flat_sentences, eligible, self.short_answer_share)

    def claims(self, question: Question, hits: Sequence[Hit], answer: Answer) -> list[tuple[str, WordSupport]]:
        """The answer's claims (its sentences but those saying it does not know) and their support (a short
        answer's read with its question)."""
        return self.claim_support(question.text, split_sentences(answer.text), ContextWords.of([h.chunk.text for h in hits]))

    def claim_support(self, question: str, answer_sentences: Sequence[str],
                      context: ContextWords) -> list[tuple[str, WordSupport]]:
        claims = [s for s in answer_sentences if not abstention_sentence(s)]
        support = [(s, self.word_support(s, context)) for s in claims]
        reading = self.short_reading(question, claims, context)
        if reading is None:
            return support
        [(claim, found)] = support
        new, stating = reading
        if not stating:  # the context does not state it: words decide
            return [(claim, replace(found, in_question=False))]
        [v] = self.embedder.embed([f"{question} {claim}"])
        closeness = self.embedder.embed(context.flat_sentences) @ v
        return [(claim, replace(found, in_question=short_answers.about_question(stating, closeness,
                                                                                 self.question_fit_margin)))]

    def texts_to_embed(self, question: Question, hits: Sequence[Hit], answer: Answer) -> list[str]:
        """What `judge` embeds for this answer (`judge_all` embeds it for many answers at once): the
        answer's sentences (coherence), and for a short answer the context states, the answer
        said with its question and the context's sentences."""
        answer_sentences = split_sentences(answer.text)
        claims = [s for s in answer_sentences if not abstention_sentence(s)]
        context = ContextWords.of([h.chunk.text for h in hits])
        reading = self.short_reading(question.text, claims, context)
        coherence = list(answer_sentences) if len(answer_sentences) > 1 else []
        if reading is None or not reading[1]:
            return coherence
        return [*coherence, f"{question.text} {claims[0]}", *context.flat_sentences]

    def relevant(self, question: str, context: ContextWords) -> int:
        """How many context sentences hold at least `relevance_threshold` of the question's content words."""
        asked = short_answers.tokens(question)
        if not asked:
            return 0
        return sum(len(asked & short_answers.tokens(s)) >= self.relevance_threshold * len(asked)
                   for s in context.flat_sentences)

    def judge(self, question: Question, hits: Sequence[Hit], answer: Answer) -> Judgement:
        context = ContextWords.of([hit.chunk.text for hit in hits])
        context_sentences = context.flat_sentences
        answer_sentences = split_sentences(answer.text)
        relevant = self.relevant(question.text, context) if context_sentences else 0
        abstained = abstains(answer.text)
        recall, expected = answer_recall(question, answer.text, abstained)
        support = self.claim_support(question.text, answer_sentences, context)
        supported = [self.supports(s) for _, s in support]
        unsupported = len(supported) - sum(supported)
        weights = [max(s.words, 1) for _, s in support]
        share = sum(w * self.score(s) for w, (_, s) in zip(weights, support)) / sum(weights) if support else 1.0
        hallucinated = self.hallucinates(supported)
        answered_unanswerable = not question.answerable and not abstained and self.answered_unanswerable_hallucinates
        rule = f"more than {self.hallucination_share:.0%} unsupported" if self.hallucination_share else "any unsupported"
        reasoning = (
            f"{relevant} of {len(context_sentences)} retrieved sentences hold {self.relevance_threshold:.0%} of the "
            f"question's words; {expected}; {self.support_words(support, supported, abstained)}"
            + (f"; {unsupported} unsupported" if unsupported else "")
            + (f": hallucination ({rule})" if hallucinated else "")
            + ("; a confident answer to an unanswerable question: hallucination" if answered_unanswerable else "")
        )
        scores = {
            "context_relevance": to_scale(relevant / len(context_sentences) if context_sentences else 0.0),
            "answer_similarity": to_scale(recall),
            "faithfulness": to_scale(share),
            "claim_hallucination_rate": round(unsupported / len(supported), 4) if supported else 0.0,
            "conciseness_offline": round(conciseness_offline(answer.text), 4),
            "coherence_offline": round(coherence_offline(self.embedder.embed(answer_sentences))
                                       if len(answer_sentences) > 1 else 1.0, 4),
        }
        return Judgement(self.name, scores, hallucination=hallucinated or answered_unanswerable, reasoning=reasoning)

    def support_words(self, support: Sequence[tuple[str, WordSupport]], supported: Sequence[bool], abstained: bool) -> str:
        """What the reasoning says of the claims' support."""
        if not supported:
            return "the answer abstains" if abstained else "empty answer"
        if support[0][1].in_question is not None:
            return "a short answer read with its question: " + (
                "a context sentence about the question states it" if supported[0] else
                "no context sentence about the question states it")
        missing = sorted({m for _, s in support for m in (*s.missing_numbers, *s.missing_names)})
        negations = sum(s.negation_changed for _, s in support)
        return (f"{sum(supported)} of {len(supported)} answer sentences supported by the context (verbatim, or "
                f"{self.support_threshold:.0%} of their words and word pairs found, their numbers and names stated, \"not\" "
                "said as the context says it)" + (f"; not stated: {', '.join(missing)}" if missing else "")
                + (f"; {negations} saying \"not\" where the context does not, or the other way round" if negations else ""))
