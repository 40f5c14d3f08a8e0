"""Every LLM request and its reply, on disk: an sqlite file in write-ahead-log mode, so the threads
of a run and several processes (a parallel sweep) read and write it at once. A file that is not a
usable database, or a folder that refuses writes (read-only, full), gives one warning and the run
goes on without the cache; a row that is not a reply of ours is a miss."""
from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from pathlib import Path

from ragexp.base.sqlite_files import shared

FILE = "responses.sqlite"

log = logging.getLogger(__name__)


class ResponseCache:
    """`get(key)` / `put(key, request, reply)`: replies are JSON objects, requests are stored
    beside them for inspection. The key is made by the caller (`client.request_key`)."""

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / FILE
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.usable = True  # cleared, with one warning, when the file or folder fails

    def db(self) -> sqlite3.Connection:
        if self._db is None:
            db = shared(self.path, "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, request TEXT NOT NULL, "
                        "reply TEXT NOT NULL, created REAL NOT NULL)", isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA synchronous = NORMAL")  # a cache: survives a crash, may lose the last replies on power loss
            self._db = db
        return self._db

    def open(self) -> None:
        """Opens (and if need be creates) the file now, before the first request rather than on
        its path; a file or folder that fails gives the one warning of `bypass`."""
        with self._lock:
            if not self.usable:
                return
            try:
                self.db()
            except (sqlite3.Error, OSError) as err:
                self.bypass(err)

    def bypass(self, err: Exception) -> None:
        """Called with the lock held: one warning, then no more use of the file this run."""
        if self.usable:
            log.warning("llm cache: %s cannot be used (%s: %s); LLM requests are not cached this run (delete the "
                        "file, or set llm.cache_dir=...)", self.path, type(err).__name__, err)
        self.usable = False

    def get(self, key: str) -> dict | None:
        with self._lock:
            if not self.usable:
                return None
            try:
                row = self.db().execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
            except (sqlite3.Error, OSError) as err:
                self.bypass(err)
                return None
        return reply_of(row[0]) if row else None

    def put(self, key: str, request: dict, reply: dict) -> None:
        with self._lock:
            if not self.usable:
                return
            try:
                self.db().execute("INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?)",
                                  (key, json.dumps(request), json.dumps(reply), time.time()))
            except (sqlite3.Error, OSError) as err:
                self.bypass(err)

    def __len__(self) -> int:
        with self._lock:
            return self.db().execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def reply_of(stored) -> dict | None:
    """A stored reply ({"text", "input_tokens", "output_tokens"}), or None for anything else."""
    try:
        reply = json.loads(stored)
    except (TypeError, ValueError):
        return None
    if (isinstance(reply, dict) and isinstance(reply.get("text"), str)
            and all(isinstance(reply.get(n), int) and not isinstance(reply.get(n), bool) for n in ("input_tokens", "output_tokens"))):
        return reply
    return None
