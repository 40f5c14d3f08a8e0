"""Generators: (question, retrieved hits) -> answer. One class per `generator` option.

The contract first (base.py), then a module per family; everything is importable from here."""
from .base import Generator
from .extractive import ExtractiveGenerator
from .openai_api import OpenAIGenerator
