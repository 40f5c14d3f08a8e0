"""Chunkers: split each document into chunks with their character spans.

Each class is one `chunker` option (conf/chunker/*.yaml). Sizes are in characters except
for `TokenChunker`, whose sizes are in tokens of an on-disk tokenizer."""
from __future__ import annotations

from typing import Iterable, Sequence

from ragexp.errors import RagexpError
from ragexp.base.progress import progress
from ragexp.types import Chunk, Document
from ragexp.base.settings import NonNegativeInt, PositiveInt


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
