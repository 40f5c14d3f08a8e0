"""The models ragexp ships, as plain data (no code is read from them): all-MiniLM-L6-v2 (Apache-2.0),
the default embedder's model under `embedder.backend=numpy` (see its README.md)."""
from pathlib import Path

MINILM = Path(__file__).resolve().parent / "all-MiniLM-L6-v2"
