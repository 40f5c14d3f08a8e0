"""Offline text helpers: sentence splitting in any script and word tokenisation (no downloads)."""
from __future__ import annotations

import re

_ABBREVIATIONS = "".join(rf"(?<!\b{re.escape(a)}\.)" for a in ("e.g", "i.e", "etc", "vs", "Mr", "Mrs", "Dr", "St", "No"))
_CLOSERS = "\"')\\]\u00bb\u201d\u2019\u300d\u300f\uff09\u3011"  # quotes and brackets that may follow a sentence's end
# Latin-style ends (. ! ?) before whitespace: a sentence break when the next character starts a
# sentence (see `_starts_sentence`), so "e.g. the" or "v1.2 of" stay whole.
_LATIN_END = re.compile(_ABBREVIATIONS + rf"(?<=[.!?])[{_CLOSERS}]*\s+")
# Ends that are a sentence break wherever they stand: CJK full stops, exclamation and question
# marks (no space follows them), the Devanagari danda, the Arabic question mark and full stop,
# the Armenian and Ethiopic full stops.
_SCRIPT_END = re.compile(rf"[\u3002\uff01\uff1f\uff61\u0964\u0965\u061f\u06d4\u0589\u1362][{_CLOSERS}]*\s*")
_WORD = re.compile(r"\w+", re.UNICODE)

STOPWORDS = frozenset(
    "a an and are as at be by for from has have how in is it its of on or that the this to was "
    "were what when where which who why will with does do did can".split()
)


def _starts_sentence(char: str) -> bool:
    """After ". " a new sentence starts with an upper-case letter, a digit, an opening quote or
    bracket, or a letter of a script without case (Devanagari, Arabic, Hebrew, CJK, ...): only a
    lower-case letter continues the sentence (an abbreviation, a version number)."""
    return char.isupper() or char.isdigit() or char in "\"'([`\u00ab\u201c\u300c" or (char.isalpha() and not char.islower())


def _cuts(line: str) -> list[int]:
    """Where the sentences of one line end (offsets after the end mark and what follows it)."""
    cuts = {m.end() for m in _LATIN_END.finditer(line) if m.end() < len(line) and _starts_sentence(line[m.end()])}
    cuts.update(m.end() for m in _SCRIPT_END.finditer(line))
    return sorted(cuts)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences in `text`, whitespace trimmed, empty ones dropped. Works in
    any script: Latin-style punctuation followed by a sentence start, CJK and other scripts' own
    end marks, and line ends (list items, headings, code) all end a sentence."""
    spans: list[tuple[int, int]] = []
    for line in re.finditer(r"[^\n]+", text):
        start = line.start()
        pieces = _cuts(line.group()) + [len(line.group())]
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
