"""The stage cache: a sweep pays once per distinct piece of work.

Each stage's output is stored under a key made of what determines it: the stage's resolved
config, the content it consumes (documents, chunks, question and hits, answer) and the code that
computes it (see `ragexp.store.code_identity`). Changing anything that changes a result
changes its key; anything else is served from disk.

- `StageCache` keeps stage outputs (chunks, hits, per-question answers and judgements) as JSON
  files (plain data, read through explicit codecs: a cache file never runs code; the entry's
  format: ragexp.store.cache_entries), written atomically (a temporary file, then a rename), so
  several processes may share one folder;
- `EmbeddingStore` (ragexp.store.embedding_store) keeps one vector per (embedder, text) in SQLite
  (WAL mode), so a text shared by two chunkers, or by the retriever and the judge, is embedded once.

A damaged or foreign entry is a miss (one warning per stage); a folder that cannot be written
(read-only, full) or a damaged SQLite file gives one warning and the run goes on without it.

`python -m ragexp.cache info|clear [--dir DIR]` shows the cache's size or empties it."""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from ragexp.store.cache_entries import FORMAT, Unreadable, entry_pieces, read_entry
from ragexp.store.cache_folder import claim
from ragexp.store.code_identity import key_of, stage_code_hash  # noqa: F401 (key_of: the pipeline builds keys with it)

log = logging.getLogger(__name__)

DEFAULT_DIR = ".ragexp-cache"


class StageCache:
    """Stage outputs as JSON under `<dir>/<stage>/<key[:2]>/<key>.json`. Counts hits and misses
    per stage (`stats`: `<stage>_cached`, `<stage>_computed`, and `<stage>_unreadable` for entries
    skipped as damaged); with `enabled=False` it computes everything and stores nothing."""

    def __init__(self, dir: str, enabled: bool):
        self.dir = Path(dir)
        self.enabled = enabled
        self.writable = True  # cleared, with one warning, when the folder refuses a write
        self.stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        if enabled:
            self.probe()

    def probe(self) -> None:
        """A folder that cannot be written (read-only, full, a file in its path): one message, and
        the run goes on uncached (`enabled` cleared, so the embedding store is not used either).
        A folder that is not ragexp's to use (it holds a user's files or another tool's tag) is
        refused, a RagexpError (`ragexp.store.cache_folder.claim`)."""
        try:
            claim(self.dir)
            with tempfile.TemporaryFile(dir=self.dir, prefix=".tmp-probe-") as file:
                file.write(b"ragexp")
                file.flush()
        except OSError as err:
            self.enabled = False
            log.warning("cache.dir: cannot write to %s (%s); the run goes on uncached: fix the folder or set "
                        "cache.dir=... (cache.enabled=false to silence this)", self.dir, err.strerror or err)

    def path(self, stage: str, key: str) -> Path:
        return self.dir / stage / key[:2] / f"{key}.json"

    def warn_once(self, topic: str, message: str, *args) -> None:
        with self._lock:
            if topic in self._warned:
                return
            self._warned.add(topic)
        log.warning(message, *args)

    def get(self, stage: str, key: str) -> Any | None:
        if not self.enabled:
            return None
        path = self.path(stage, key)
        try:
            head, value = read_entry(path.read_bytes().decode("utf-8"))
            if head.get("format") != FORMAT:
                raise Unreadable(f"not a {FORMAT} entry")
            if head.get("stage") != stage or head.get("key") != key:
                raise Unreadable("an entry of another stage or key")
            return value
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError) as err:  # damaged, foreign, or unreadable: recompute it
            with self._lock:
                self.stats[f"{stage}_unreadable"] += 1
            self.warn_once(f"read:{stage}", "cache: skipping unreadable %s entries, recomputed (first: %s: %s); "
                           "this warning is shown once per stage", stage, path, err)
            return None

    def put(self, stage: str, key: str, value: Any) -> None:
        if not (self.enabled and self.writable):
            return
        path = self.path(stage, key)
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as file:
                tmp = file.name
                for piece in entry_pieces(stage, key, value):
                    file.write(piece)
            os.replace(tmp, path)
            tmp = None
        except OSError as err:
            self.writable = False
            self.warn_once("write", "cache.dir: cannot write to %s (%s); the run goes on uncached (nothing more is "
                           "stored): free space or fix the folder, or set cache.dir=... or cache.enabled=false",
                           self.dir, err.strerror or err)
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    @staticmethod
    def stored_key(key: str, compute: Callable) -> str:
        """The entry's key: the caller's key and the stage's own code (`stage_code_hash(compute)`)."""
        return hashlib.sha256(f"{key}\0{stage_code_hash(compute)}".encode()).hexdigest()

    def holds(self, stage: str, key: str, compute: Callable) -> bool:
        """Whether an entry for (stage, key) of `compute`'s code is stored (not whether it is readable)."""
        return self.enabled and self.path(stage, self.stored_key(key, compute)).is_file()

    def cached(self, stage: str, key: str, compute: Callable[[], Any], expect: Callable[[Any], str | None] | None = None,
               keep: Callable[[Any], bool] | None = None) -> Any:
        """The stored value for (stage, key), else `compute()`, stored unless `keep(value)` says
        not to (a judgement in which some criteria failed: a rerun judges it again). The entry's
        key also holds the stage's own code (`stage_code_hash(compute)`). `expect(value)` says what
        is wrong with a stored value (a well-formed entry of the wrong type, a score off its
        scale), or None: such an entry is counted unreadable and computed again, never used."""
        key = self.stored_key(key, compute)
        value = self.get(stage, key)
        wrong = expect(value) if value is not None and expect is not None else None
        if wrong:
            with self._lock:
                self.stats[f"{stage}_unreadable"] += 1
            self.warn_once(f"read:{stage}", "cache: skipping unreadable %s entries, recomputed (first: %s: %s); "
                           "this warning is shown once per stage", stage, self.path(stage, key), wrong)
            value = None
        with self._lock:
            self.stats[f"{stage}_{'cached' if value is not None else 'computed'}"] += 1
        if value is None:
            value = compute()
            if keep is None or keep(value):
                self.put(stage, key, value)
        return value
