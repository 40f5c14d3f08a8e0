"""The parts of a RAG system that a config chooses: chunkers, embedders, retrievers, rerankers,
generators, and the system under test itself."""
