"""The `sentence` chunker: whole sentences packed into chunks."""
from __future__ import annotations

from ragexp.base.text import sentence_spans
from ragexp.types import Document
from ragexp.components.chunkers.base import SizedChunker, pack


class SentenceChunker(SizedChunker):
    """Whole sentences packed into chunks of at most `chunk_size` characters; the overlap
    repeats whole sentences up to `chunk_overlap` characters."""

    def spans(self, document: Document) -> list[tuple[int, int]]:
        return pack(sentence_spans(document.text), self.chunk_size, self.chunk_overlap)
