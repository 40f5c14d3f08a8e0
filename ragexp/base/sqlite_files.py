"""SQLite files that several processes open at once (the LLM reply cache, the embedding store, the
MLflow store). A new file starts in rollback-journal mode, and there two processes making its
tables together can each hold a lock the other waits for: SQLite then answers one of them
"database is locked" at once, without waiting its busy timeout. So a file is opened, switched to
write-ahead-log mode and given its tables under an exclusive lock on `<file>-lock` (beside its `-wal` and `-shm`); after that,
WAL lets readers and a writer go on together and the busy timeout covers the rest."""
from __future__ import annotations

import fcntl
import sqlite3
from contextlib import contextmanager
from pathlib import Path

BUSY_TIMEOUT_S = 60


@contextmanager
def creation_lock(database: Path):
    """An exclusive lock on `<database>-lock` (flock: released when the process dies, however it dies)."""
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(database.with_name(database.name + "-lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def shared(database: Path, schema: str, **connect) -> sqlite3.Connection:
    """A connection to `database` in WAL mode with the table of `schema` (a `CREATE TABLE IF NOT
    EXISTS` statement) made, opened under the creation lock; `connect` goes to `sqlite3.connect`."""
    with creation_lock(database):
        db = sqlite3.connect(database, timeout=BUSY_TIMEOUT_S, **connect)
        try:
            db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(schema)
            db.commit()
        except BaseException:
            db.close()
            raise
    return db
