"""Rerankers: a question and the retriever's first `candidates` hits -> the same hits in a new order.

The contract first (base.py), then a module per family; everything is importable from here."""
from .base import NoReranker, Reranker, ranked
from .mmr import MMRReranker
from .cross_encoder import CrossEncoderReranker, cross_encoder_problem, load_cross_encoder, package_folder
from .llm import LLMReranker, candidate_list, read_ranking, read_relevance
