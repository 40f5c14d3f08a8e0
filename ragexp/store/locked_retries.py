"""SQLite lock retries: an MLflow call retried with backoff while a SQLite store answers "database is
locked" (parallel sweep jobs writing to one mlflow.db), or refuses a dataset another writer created
between MLflow's look-up and its insert (parallel jobs logging the same dataset input: "UNIQUE
constraint failed: datasets.", through a server too; the retry finds the dataset)."""
from __future__ import annotations

import random
import time


RACES = ("database is locked", "UNIQUE constraint failed: datasets.")  # what another writer at once makes a store answer


def retry_locked(call, *args, attempts: int = 8, **kwargs):
    """`call(*args, **kwargs)`, retried with backoff while a store answers one of RACES (parallel
    sweep jobs writing to one mlflow.db, or to one server on it); a failed write is rolled back, so a
    retry does not log twice."""
    for attempt in range(attempts):
        try:
            return call(*args, **kwargs)
        except Exception as err:
            if not any(race in str(err) for race in RACES) or attempt == attempts - 1:
                raise
            time.sleep(min(5.0, 0.1 * 2**attempt) * random.uniform(0.5, 1.5))


class RetryingLocked:
    """An MlflowClient whose calls go through `retry_locked`."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute
        return lambda *args, **kwargs: retry_locked(attribute, *args, **kwargs)
