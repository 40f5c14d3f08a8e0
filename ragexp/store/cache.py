"""The stage cache: a sweep pays once per distinct piece of work.

Each stage's output is stored under a key made of what determines it: the stage's resolved
config, the content it consumes (documents, chunks, question and hits, answer) and the code that
computes it (see `ragexp.store.code_identity`). Changing anything that changes a result
changes its key; anything else is served from disk.

- `StageCache` keeps stage outputs (chunks, hits, per-question answers and judgements) as JSON
  files (plain data, read through explicit codecs: a cache file never runs code), written
  atomically (a temporary file, then a rename), so several processes may share one folder;
- `EmbeddingStore` keeps one vector per (embedder, text) in SQLite (WAL mode), so a text
  shared by two chunkers, or by the retriever and the judge, is embedded once.

A damaged or foreign entry is a miss (one warning per stage); a folder that cannot be written
(read-only, full) or a damaged SQLite file gives one warning and the run goes on without it.

`python -m ragexp.cache info|clear [--dir DIR]` shows the cache's size or empties it."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sqlite3
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ragexp.base.sqlite_files import shared
from ragexp.store.cache_folder import claim
from ragexp.store.code_identity import key_of, stage_code_hash  # noqa: F401 (key_of: the pipeline builds keys with it)
from ragexp.types import CODECS

log = logging.getLogger(__name__)

DEFAULT_DIR = ".ragexp-cache"
FORMAT = "ragexp-stage-cache/2"  # the layout of an entry file; /1 was pickles, never read


class Unreadable(ValueError):
    """A cache entry that is damaged, from another format, or not ragexp's."""


def encode(value: Any) -> Any:
    """A stage output as plain JSON data: records as {"<Type>": {...fields}}, dicts as {"dict": {...}}."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {"dict": {str(k): encode(v) for k, v in value.items()}}
    if type(value) in CODECS:
        name, to_dict, _ = CODECS[type(value)]
        return {name: to_dict(value)}
    raise TypeError(f"cannot store a {type(value).__name__} in the stage cache")


DECODERS = {name: from_dict for name, _, from_dict in CODECS.values()}


def decode(data: Any) -> Any:
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v) for v in data]
    if isinstance(data, dict) and len(data) == 1:
        [(name, payload)] = data.items()
        if name == "dict" and isinstance(payload, dict):
            return {k: decode(v) for k, v in payload.items()}
        if name in DECODERS and isinstance(payload, dict):
            try:
                return DECODERS[name](payload)
            except (KeyError, TypeError, ValueError) as err:
                raise Unreadable(f"a damaged {name} ({type(err).__name__}: {err})") from None
    raise Unreadable(f"unknown data {json.dumps(data)[:60]}")


def entry_pieces(stage: str, key: str, value: Any) -> Iterator[bytes]:
    """A cache entry's JSON, {"format", "stage", "key", "value"}, in pieces: a list value one
    element at a time, so a stage output of 10^6 chunks is never held as one encoded tree and one
    string (at 10^6 chunks that was ~4 GB on top of the chunks, a whole run's peak memory)."""
    head = {"format": FORMAT, "stage": stage, "key": key}
    if not isinstance(value, (list, tuple)):
        yield json.dumps({**head, "value": encode(value)}, ensure_ascii=False).encode()
        return
    yield json.dumps(head, ensure_ascii=False)[:-1].encode() + b', "value": ['
    for i, item in enumerate(value):
        yield (b", " if i else b"") + json.dumps(encode(item), ensure_ascii=False).encode()
    yield b"]}"


_SPACE = re.compile(r"[ \t\n\r]*")
_JSON = json.JSONDecoder()


def read_entry(text: str) -> tuple[dict, Any]:
    """An entry's head ({"format", "stage", "key"}) and its decoded value, read as entry_pieces
    writes it: the object's members one at a time and a list value one element at a time, each
    element decoded into its record at once, so that 10^6 chunks are never held as a JSON tree
    beside the records made from it. Anything but one JSON object is Unreadable."""
    head: dict[str, Any] = {}
    value: Any = None
    try:
        i, closed = _opened(text, 0, "{", "}")
        while not closed:
            name, i = _JSON.raw_decode(text, i)
            i = _expect(text, _skip(text, i), ":")
            if name == "value" and text[i] == "[":
                value, i = _read_list(text, i)
            elif name == "value":
                data, i = _JSON.raw_decode(text, i)
                value = decode(data)
            else:
                head[str(name)], i = _JSON.raw_decode(text, i)
            i, closed = _separator(text, i, "}")
    except IndexError:
        raise Unreadable("the entry ends early (truncated)") from None
    if _skip(text, i) != len(text):
        raise Unreadable(f"extra data after the entry at character {i}")
    return head, value


def _read_list(text: str, i: int) -> tuple[list, int]:
    """The decoded elements of the JSON list that starts at text[i], and the index after it."""
    items: list[Any] = []
    i, closed = _opened(text, i, "[", "]")
    while not closed:
        data, i = _JSON.raw_decode(text, i)
        items.append(decode(data))
        i, closed = _separator(text, i, "]")
    return items, i


def _opened(text: str, i: int, opening: str, closing: str) -> tuple[int, bool]:
    """After `opening` at text[i]: past an immediate `closing` (True: empty), else at the first item."""
    i = _expect(text, i, opening)
    return (i + 1, True) if text[i] == closing else (i, False)


def _separator(text: str, i: int, closing: str) -> tuple[int, bool]:
    """After an item: past `closing` (True: the end), else past its ',' at the next item."""
    i = _skip(text, i)
    if text[i] == closing:
        return i + 1, True
    i = _expect(text, i, ",")
    if text[i] == closing:
        raise Unreadable(f"a ',' before {closing!r} at character {i}")
    return i, False


def _skip(text: str, i: int) -> int:
    match = _SPACE.match(text, i)
    return match.end() if match else i


def _expect(text: str, i: int, char: str) -> int:
    i = _skip(text, i)
    if text[i] != char:
        raise Unreadable(f"expected {char!r} at character {i}")
    return _skip(text, i + 1)


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
