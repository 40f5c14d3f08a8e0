"""ragexp: declarative, config-driven experiments for evaluating RAG pipelines."""

__version__ = "0.1.0"
