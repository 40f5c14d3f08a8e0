"""Retrievers: `index(chunks)` once, then `search(queries)` -> the top_k hits of each query.

The contract first (base.py), then a module per family; everything is importable from here."""
from .base import Retriever
from .dense import DenseRetriever
from .bm25 import BM25Impl, BM25Retriever, TIE_MARGIN, bm25_postings
from .ties import TIE_DIGITS, best_first, id_ranks, in_tie_order, rounded
from .hybrid import HybridRetriever
