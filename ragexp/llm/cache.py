"""Every LLM request and its reply, on disk: an sqlite file in write-ahead-log mode, so the threads
of a run and several processes (a parallel sweep) read and write it at once."""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

FILE = "responses.sqlite"


class ResponseCache:
    """`get(key)` / `put(key, request, reply)`: replies are JSON objects, requests are stored
    beside them for inspection. The key is made by the caller (`client.request_key`)."""

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / FILE
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA busy_timeout = 60000")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")  # a cache: survives a crash, may lose the last replies on power loss
            db.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, request TEXT NOT NULL, "
                       "reply TEXT NOT NULL, created REAL NOT NULL)")
            self._db = db
        return self._db

    def get(self, key: str) -> dict | None:
        with self._lock:
            row = self.db().execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, request: dict, reply: dict) -> None:
        with self._lock:
            self.db().execute("INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?)",
                              (key, json.dumps(request), json.dumps(reply), time.time()))

    def __len__(self) -> int:
        with self._lock:
            return self.db().execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
