"""The `token` chunker: sizes in tokens of an on-disk tokenizer."""
from __future__ import annotations

from typing import Any

from ragexp.errors import RagexpError
from ragexp.types import Document
from ragexp.base.settings import NonNegativeInt, PositiveInt
from ragexp.components.chunkers.base import SizedChunker


def minilm_tokenizer_file() -> str:
    """all-MiniLM-L6-v2's tokenizer as ragexp ships it (beside the model's weights, no PyTorch needed)."""
    from ragexp.models import MINILM

    return str(MINILM / "tokenizer.json")


class TokenChunker(SizedChunker):
    """Windows of `chunk_size` tokens (overlap `chunk_overlap` tokens) of a tokenizer read from
    disk (`tokenizer_file`, default: the one shipped with all-MiniLM-L6-v2), so it works offline.
    Chunks are the original text between the first and last token of each window."""

    def __init__(self, chunk_size: PositiveInt, chunk_overlap: NonNegativeInt, tokenizer_file: str | None):
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
