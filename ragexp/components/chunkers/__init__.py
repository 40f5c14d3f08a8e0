"""Chunkers: split each document into chunks with their character spans.

The contract first (base.py), then a module per family; everything is importable from here."""
from .base import Chunker, SizedChunker, locate, pack
from .langchain import FixedChunker, LangchainChunker, MarkdownChunker, RecursiveChunker
from .sentence import SentenceChunker
from .tokens import TokenChunker, minilm_tokenizer_file
from .semantic import SemanticChunker
