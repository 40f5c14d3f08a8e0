"""The stage cache: a sweep pays once per distinct piece of work.

Each stage's output is stored under a key made of what determines it: the stage's resolved
config and the content it consumes (documents, chunks, question and hits, answer). Changing
anything that changes a result changes its key; anything else is served from disk.

- `StageCache` keeps pickled stage outputs (chunks, hits, per-question answers and
  judgements) as files written atomically (write to a temporary file, then rename), so
  several processes may share one cache folder;
- `EmbeddingStore` keeps one vector per (embedder, text) in SQLite (WAL mode), so a text
  shared by two chunkers, or by the retriever and the judge, is embedded once.

`python -m ragexp.cache info|clear [--dir DIR]` shows the cache's size or empties it."""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import sqlite3
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

DEFAULT_DIR = ".ragexp-cache"


def key_of(*parts: Any) -> str:
    """A stable hash of JSON-able parts (configs, texts, other keys)."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class StageCache:
    """Pickled stage outputs under `<dir>/<stage>/<key[:2]>/<key>.pkl`. Counts hits and misses
    per stage (`stats`: `<stage>_cached`, `<stage>_computed`); with `enabled=False` it computes everything and stores nothing."""

    def __init__(self, dir: str = DEFAULT_DIR, enabled: bool = True):
        self.dir = Path(dir)
        self.enabled = enabled
        self.stats: Counter[str] = Counter()
        self._lock = threading.Lock()

    def path(self, stage: str, key: str) -> Path:
        return self.dir / stage / key[:2] / f"{key}.pkl"

    def get(self, stage: str, key: str) -> Any | None:
        if not self.enabled:
            return None
        try:
            with self.path(stage, key).open("rb") as file:
                return pickle.load(file)
        except FileNotFoundError:
            return None
        except Exception:  # damaged, or written by another ragexp version
            return None  # recompute it

    def put(self, stage: str, key: str, value: Any) -> None:
        if not self.enabled:
            return
        path = self.path(stage, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as tmp:
            pickle.dump(value, tmp, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp.name, path)

    def cached(self, stage: str, key: str, compute: Callable[[], Any]) -> Any:
        """The stored value for (stage, key), else `compute()`, stored."""
        value = self.get(stage, key)
        with self._lock:
            self.stats[f"{stage}_{'cached' if value is not None else 'computed'}"] += 1
        if value is None:
            value = compute()
            self.put(stage, key, value)
        return value


class EmbeddingStore:
    """Vectors per (embedder key, text) in `<dir>/embeddings.sqlite`, shared across processes."""

    def __init__(self, dir: str = DEFAULT_DIR):
        self.file = Path(dir) / "embeddings.sqlite"
        self._local = threading.local()

    def db(self) -> sqlite3.Connection:
        if getattr(self._local, "db", None) is None:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.file, timeout=60)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS vectors (model TEXT, text_sha TEXT, vector BLOB, "
                       "PRIMARY KEY (model, text_sha))")
            self._local.db = db
        return self._local.db

    @staticmethod
    def sha(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, model: str, texts: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        by_sha = {self.sha(t): t for t in texts}
        shas = list(by_sha)
        for start in range(0, len(shas), 500):
            batch = shas[start : start + 500]
            rows = self.db().execute(
                f"SELECT text_sha, vector FROM vectors WHERE model = ? AND text_sha IN ({','.join('?' * len(batch))})",
                [model, *batch],
            )
            for sha, blob in rows:
                found[by_sha[sha]] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put(self, model: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        rows = [(model, self.sha(t), np.asarray(v, dtype=np.float32).tobytes()) for t, v in zip(texts, vectors)]
        with self.db() as db:
            db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)


def folder_size(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()] if path.exists() else []
    return len(files), sum(p.stat().st_size for p in files)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ragexp.cache", description="Show the size of ragexp's stage cache, or clear it.")
    parser.add_argument("action", choices=["info", "clear"])
    parser.add_argument("--dir", default=DEFAULT_DIR, help=f"cache folder (default {DEFAULT_DIR}, the config's cache.dir)")
    args = parser.parse_args(argv)
    root = Path(args.dir)
    if args.action == "clear":
        files, size = folder_size(root)
        shutil.rmtree(root, ignore_errors=True)
        print(f"removed {root}: {files} files, {size / 1e6:.1f} MB")
        return 0
    if not root.exists():
        print(f"{root}: empty (no cache yet)")
        return 0
    total_files = total_size = 0
    for entry in sorted(root.iterdir()):
        files, size = folder_size(entry) if entry.is_dir() else (1, entry.stat().st_size)
        total_files, total_size = total_files + files, total_size + size
        print(f"{entry.name:<24} {files:>8} files {size / 1e6:>10.1f} MB")
    print(f"{'total':<24} {total_files:>8} files {total_size / 1e6:>10.1f} MB   ({root.resolve()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
