"""The embedding store: one vector per (embedder, text) in SQLite (WAL mode), shared by every
process using the cache folder, so a text shared by two chunkers, or by the retriever and the
judge, is embedded once. A damaged SQLite file or a folder that refuses writes gives one warning
and the run goes on with vectors kept in memory only."""
from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ragexp.base.sqlite_files import shared
from ragexp.store.cache import DEFAULT_DIR

log = logging.getLogger("ragexp.store.cache")  # the stage cache's logger, as before this module was split from it


class EmbeddingStore:
    """Vectors per (embedder key, text) in `<dir>/embeddings.sqlite`, shared across processes. A
    file that is not a usable SQLite database, or a folder that refuses writes, gives one warning
    and the run goes on with vectors kept in memory only."""

    def __init__(self, dir: str = DEFAULT_DIR):
        self.file = Path(dir) / "embeddings.sqlite"
        self._local = threading.local()
        self.usable = True
        self._warned = threading.Lock()

    def db(self) -> sqlite3.Connection:
        if getattr(self._local, "db", None) is None:
            self._local.db = shared(self.file, "CREATE TABLE IF NOT EXISTS vectors (model TEXT, text_sha TEXT, "
                                    "vector BLOB, PRIMARY KEY (model, text_sha))")
        return self._local.db

    def bypass(self, err: Exception) -> None:
        if self._warned.acquire(blocking=False):
            log.warning("cache: %s cannot be used (%s: %s); vectors are not cached this run (delete the file or "
                        "run `python -m ragexp.cache clear`, or set cache.dir=...)", self.file, type(err).__name__, err)
        self.usable = False

    @staticmethod
    def sha(text: str) -> str:
        """A text's key; a lone surrogate (a "\\ud800" escape in a JSON file) kept as its code point's
        bytes, so such a text has a key and every valid text the one it had."""
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, model: str, texts: Sequence[str]) -> dict[str, np.ndarray]:
        return dict(self.stored(model, texts))

    def stored(self, model: str, texts: Sequence[str]) -> Iterator[tuple[str, np.ndarray]]:
        """(text, vector) of the `texts` the store holds, as they are read (500 texts per query),
        so a caller can copy a million vectors where they belong without holding them all twice."""
        if not self.usable:
            return
        by_sha = {self.sha(t): t for t in texts}
        shas = list(by_sha)
        try:
            for start in range(0, len(shas), 500):
                batch = shas[start : start + 500]
                rows = self.db().execute(
                    f"SELECT text_sha, vector FROM vectors WHERE model = ? AND text_sha IN ({','.join('?' * len(batch))})",
                    [model, *batch],
                ).fetchall()
                for sha, blob in rows:
                    vector = vector_of(blob)
                    if vector is not None and sha in by_sha:
                        yield by_sha[sha], vector
        except (sqlite3.Error, OSError) as err:
            self.bypass(err)

    def put(self, model: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        if not self.usable:
            return
        rows = [(model, self.sha(t), np.asarray(v, dtype=np.float32).tobytes()) for t, v in zip(texts, vectors)]
        try:
            with self.db() as db:
                db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)
        except (sqlite3.Error, OSError) as err:
            self.bypass(err)


def vector_of(blob: Any) -> np.ndarray | None:
    """A stored vector, or None for a row that is not one of ours (vectors are stored L2-normalised)."""
    if not isinstance(blob, bytes) or not blob or len(blob) % 4:
        return None
    vector = np.frombuffer(blob, dtype=np.float32)
    return vector if np.isfinite(vector).all() and abs(float(vector @ vector) - 1.0) < 1e-3 else None
