"""SQLite lock retries: an MLflow call retried with backoff while a SQLite store answers "database is
locked" (parallel sweep jobs writing to one mlflow.db)."""
from __future__ import annotations

import random
import time


def retry_locked(call, *args, attempts: int = 8, **kwargs):
    """`call(*args, **kwargs)`, retried with backoff while a SQLite store answers "database is
    locked" (parallel sweep jobs writing to one mlflow.db); a failed write is rolled back, so a
    retry does not log twice."""
    for attempt in range(attempts):
        try:
            return call(*args, **kwargs)
        except Exception as err:
            if "database is locked" not in str(err) or attempt == attempts - 1:
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
