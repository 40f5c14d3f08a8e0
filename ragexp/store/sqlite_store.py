"""Opening an MLflow SQLite store safely: MLflow creates a new store's tables when it first opens
it, and two processes doing so at once, or one killed half-way, leave a store no later run can open
("Online migration expected to match one row", "duplicate column"). The first open of a store is
serialised by a lock file beside it; a store left half-made that holds no run is set aside and made
again; one that holds runs and cannot be opened is one line saying what to do."""
from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

from ragexp.base.sqlite_files import creation_lock
from ragexp.errors import RagexpError

log = logging.getLogger("ragexp")
T = TypeVar("T")


def database_of(uri: str) -> Path | None:
    """The database file of a `sqlite:///PATH` tracking URI; None for any other store."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def holds_runs(database: Path) -> bool:
    """Whether the store has a run in it (a half-made store has none, or no runs table yet)."""
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
            return connection.execute("SELECT COUNT(*) FROM runs").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def opened(uri: str, open_store: Callable[[], T], use: Callable[[T], object] = lambda store: None) -> T:
    """`open_store()` (which makes MLflow open the store at `uri`) and a first `use` of it, for a
    SQLite store under its creation lock; a store that fails either and holds no run is set aside
    (`NAME.broken-TIME`) and made again, once."""
    database = database_of(uri)
    if database is None:
        return open_store()

    def first_open() -> T:
        store = open_store()
        use(store)
        return store

    with creation_lock(database):
        try:
            return first_open()
        except Exception as err:  # noqa: BLE001 - MLflow's migration errors are of many kinds
            if not database.exists() or holds_runs(database):
                raise RagexpError(f"tracker.tracking_uri: the MLflow store {database} cannot be opened "
                                  f"({type(err).__name__}: {str(err).splitlines()[0][:200]}); it holds runs, so it "
                                  "was left as it is: check it with `mlflow ui --backend-store-uri "
                                  f"{uri}`, or log to another store") from None
            aside = database.with_name(f"{database.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}")
            database.rename(aside)
            for suffix in ("-wal", "-shm"):
                database.with_name(database.name + suffix).unlink(missing_ok=True)
            forget_engine(uri)
            log.warning("the MLflow store %s was half-made (its tables were being created when a process stopped) "
                        "and held no run: set aside as %s and made again", database, aside.name)
            return first_open()


def forget_engine(uri: str) -> None:
    """Drops the engine MLflow keeps for `uri` for the rest of the process (its connections would go
    on reading the file that was set aside)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    engines = getattr(SqlAlchemyStore, "_engine_map", {})
    with getattr(SqlAlchemyStore, "_engine_map_lock", threading.Lock()):
        engine = engines.pop(uri, None)
    if engine is not None:
        engine.dispose()
