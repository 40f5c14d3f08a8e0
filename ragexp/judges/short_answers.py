"""A short answer read in its question's context. "Port 7070." to "Which port does quarryd listen
on?" claims that quarryd listens on port 7070: read alone, its sentence says almost nothing a
context sentence could be compared with, so the offline judges flagged such answers as unsupported
although the context states them (the judges read a short answer so unless it is context text
verbatim). Read with its question, the answer is supported when one context sentence

- states what the answer adds to the question (`said`: its words and numbers the question lacks,
  every number and more than `share` of them) in a passage that states the answer's own names and
  numbers, and
- is about the question: the answer with its question ("Which port does quarryd listen on? Port
  7070.") is as close to that sentence as to any other of the context, within `margin` of cosine.

The second check is what tells a right answer from another name or number of the same context; it
catches some such swaps, not most (the bench group short_answers gives the figures). It is the only
one that needs embeddings, and runs only when the first passes (`stating`, then `about_question`).

An answer to an instruction ("Summarise the document.": a summary, `instructs`) is not a short
answer, however short: it says what it claims on its own, and read with the instruction it would be
held to one context sentence.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ragexp.base.text import STOPWORDS

_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_TOKEN = re.compile(_NUMBER.pattern + r"|\w+")
_MONTHS = {m[:3]: m for m in ("january february march april may june july august september october november "
                              "december").split()}
# words that say the answer is one ("It is ...", "The answer is ...") and claim nothing themselves;
# yes and no claim what the question asks, which no word of the context shows
FILLER = frozenset("answer would that there these those they he she his her their them yes no".split())


def token(word: str) -> str:
    """A word as compared: lower-cased; a number without thousands separators ("1,000": "1000"), an
    ordinal as its number ("23rd": "23"), a month by its full name ("Sept": "september"), and a
    plural s dropped ("hours": "hour")."""
    word = word.lower()
    if word[0].isdigit():
        word = word.replace(",", "")
        return re.sub(r"^(\d+)(?:st|nd|rd|th)$", r"\1", word)
    if (month := _MONTHS.get(word[:3])) and month.startswith(word) and len(word) >= 3:
        return month
    return word[:-1] if len(word) > 4 and word.endswith("s") and not word.endswith("ss") else word


def tokens(text: str) -> set[str]:
    """The content words and numbers of `text` (see `token`), stop words left out."""
    return {token(w) for w in _TOKEN.findall(text) if w.lower() not in STOPWORDS}


def states(passage: str, anchors: set[str]) -> bool:
    """The passage states every name and number in `anchors`, word by word ("Mercedes-Benz") as
    `token` reads them ("1,200" is "1200")."""
    words = {token(w) for w in _TOKEN.findall(passage)} | {token(n) for n in _NUMBER.findall(passage)}  # "0" of "Quarry0"
    return {token(w) for a in anchors for w in _TOKEN.findall(a)} <= words


# the first words of an instruction whose answer is a text of its own, not an answer to a question
_INSTRUCTION = re.compile(r"^\W*(?:please\s+)?(?:summari[sz]e|summary|sum up|write|describe|explain|outline|paraphrase"
                          r"|rewrite|translate|tl;?dr)\b", re.IGNORECASE)


def instructs(question: str) -> bool:
    """The "question" asks for a text ("Summarise the document.", "Write a summary ..."), not for a
    fact: its answer is a summary or an essay, read as claims of its own."""
    return bool(_INSTRUCTION.match(question))


def said(question: str, answer: str, max_words: int) -> set[str]:
    """What a short answer adds to its question: its words and numbers the question lacks, or, when
    it only repeats the question's words (one of the options it names, "Kitchens of Distinction" to
    "Which band has more members, Kitchens of Distinction or Royal Blood?"), those words. Empty when
    the answer is longer than `max_words` words, says only yes or no, or answers an instruction
    (`instructs`: a one-sentence summary is no short answer)."""
    if not 0 < len(re.findall(r"\w+", answer)) <= max_words or instructs(question):
        return set()
    answered = tokens(answer) - FILLER
    return answered - tokens(question) or answered


def stating(new: set[str], context_sentences: Sequence[str], eligible: Sequence[bool], share: float) -> list[int]:
    """The `eligible` context sentences (their passage states the answer's names and numbers) that
    state most of `new`, every number and more than `share` of all (their indices; none: the context
    does not state the answer, and no embedding is needed to say so)."""
    numbers = {t for t in new if t[0].isdigit()}
    found = [len(new & t) / len(new) if ok and numbers <= t else 0.0
             for t, ok in zip(map(tokens, context_sentences), eligible)]
    best = max(found, default=0.0)
    return [i for i, f in enumerate(found) if f == best] if best > share else []


def about_question(stating_sentences: Sequence[int], closeness: np.ndarray, margin: float) -> bool:
    """One of the sentences stating the answer is about the question: its `closeness` (cosine with the
    answer said with its question) within `margin` of the best of any context sentence."""
    return bool(stating_sentences) and (max(float(closeness[i]) for i in stating_sentences)
                                        >= float(np.max(closeness)) - margin)


def supported(new: set[str], context_sentences: Sequence[str], eligible: Sequence[bool], closeness: np.ndarray,
              share: float, margin: float) -> bool:
    """Whether one `eligible` context sentence states `new` (`stating`) and is about the question
    (`about_question`)."""
    return about_question(stating(new, context_sentences, eligible, share), closeness, margin)
