"""Offline text helpers: sentence splitting and word tokenisation (no downloads)."""
from __future__ import annotations

import re

_ABBREVIATIONS = "".join(rf"(?<!\b{re.escape(a)}\.)" for a in ("e.g", "i.e", "etc", "vs", "Mr", "Mrs", "Dr", "St", "No"))
# A sentence ends at . ! ? (optionally followed by quotes or brackets) before whitespace and an
# upper-case letter, digit or opening quote; lines (list items, headings, code) also end sentences.
_SENTENCE_END = re.compile(_ABBREVIATIONS + r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9`])")
_WORD = re.compile(r"\w+", re.UNICODE)

STOPWORDS = frozenset(
    "a an and are as at be by for from has have how in is it its of on or that the this to was "
    "were what when where which who why will with does do did can".split()
)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences in `text`, whitespace trimmed, empty ones dropped."""
    spans: list[tuple[int, int]] = []
    for line in re.finditer(r"[^\n]+", text):
        start = line.start()
        pieces = [m.end() for m in _SENTENCE_END.finditer(line.group())] + [len(line.group())]
        for cut in pieces:
            end = line.start() + cut
            piece = text[start:end]
            stripped = piece.strip()
            if stripped:
                lead = len(piece) - len(piece.lstrip())
                spans.append((start + lead, start + lead + len(stripped)))
            start = end
    return spans


def split_sentences(text: str) -> list[str]:
    """Sentences of `text` (lines and sentence punctuation both end a sentence)."""
    return [text[a:b] for a, b in sentence_spans(text)]


def words(text: str) -> list[str]:
    """Lower-cased word tokens without stop words, for lexical matching and BM25."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]
