"""Chunkers that are langchain-text-splitters' splitters: `fixed`, `recursive`, `markdown`."""
from __future__ import annotations

import re

from ragexp.types import Document
from ragexp.base.settings import NonNegativeInt, PositiveInt
from ragexp.components.chunkers.base import SizedChunker, locate


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

    def __init__(self, chunk_size: PositiveInt, chunk_overlap: NonNegativeInt, max_header_level: PositiveInt):
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
