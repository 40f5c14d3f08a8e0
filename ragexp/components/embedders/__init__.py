"""Embedders: texts -> L2-normalised vectors (so a dot product is the cosine similarity).

The contract first (base.py), then a module per family; everything is importable from here."""
from .base import Embedder, EmbeddingCache, _BUILDING, _HASH_WORD
from .local_model import SentenceTransformerEmbedder, load_sentence_transformer
from .hashed import HashEmbedder
from .openai_api import OpenAIEmbedder, api_key
