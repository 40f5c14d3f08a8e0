"""The MLflow client cache: a store opened once per process (its client and experiment, made if new),
shared by the jobs of a sweep in this process and by the sweep itself."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ragexp.base.redact import scrub_url
from ragexp.errors import RagexpError
from ragexp.store.dead_runs import close_dead_runs
from ragexp.store.locked_retries import RetryingLocked
from ragexp.store.sqlite_store import database_of, opened


def artifacts_beside(uri: str) -> str | None:
    """A SQLite store keeps its experiments' artifacts in `mlruns/` beside the database file, so the
    store is one folder wherever the command runs (MLflow's default is `./mlruns` of the current
    folder). Other stores keep their own default."""
    if not uri.startswith("sqlite:///"):
        return None
    database = Path(uri.removeprefix("sqlite:///")).resolve()
    return (database.parent / "mlruns").as_uri()


OPENED: dict[tuple[str, str], tuple[Any, str]] = {}  # (store, experiment) -> (client, experiment id), per process


def store_identity(uri: str) -> str:
    """What tells one store from another for the opened clients: a SQLite store's file (its absolute
    path: `sqlite:///mlflow.db` is another file in another folder), any other store's URI."""
    database = database_of(uri)
    return uri if database is None else str(database.resolve())


# What earlier MLflow 3.x UIs read to choose an experiment's first page: a sweep is runs to compare
# first (each run's traces are in its Traces tab). MLflow 3.17's UI ignores it and follows its own
# GenAI / Model training switch (docs/how-to/tracing.md, "What the MLflow UI opens on"). A kind set by hand is kept.
EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_TAGS = {EXPERIMENT_KIND: "custom_model_development"}


def experiment_client(uri: str, experiment: str) -> tuple[Any, str]:
    """The MLflow client of the store at `uri` and the id of its experiment `experiment` (made if new).
    A process opens a store once: the runs left RUNNING by dead processes are looked for then."""
    import mlflow

    logging.getLogger("alembic").setLevel(logging.WARNING)
    key = (store_identity(uri), experiment)
    kept = OPENED.get(key)
    if kept is not None:
        return kept
    try:
        client = opened(uri, lambda: RetryingLocked(mlflow.MlflowClient()), lambda c: c.search_experiments(max_results=1))
        found = client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else client.create_experiment(
            experiment, artifact_location=artifacts_beside(uri), tags=EXPERIMENT_TAGS)
        if found and EXPERIMENT_KIND not in found.tags:  # made by an older ragexp or by hand
            client.set_experiment_tag(experiment_id, EXPERIMENT_KIND, EXPERIMENT_TAGS[EXPERIMENT_KIND])
        close_dead_runs(client, experiment_id)
    except RagexpError:
        raise
    except Exception as err:
        from ragexp.errors import StoreUnreachable

        unanswered = uri.startswith(("http://", "https://")) and getattr(err, "error_code", None) in (
            None, "INTERNAL_ERROR", "TEMPORARILY_UNAVAILABLE")  # no answer, or a server error: not the setting
        raise (StoreUnreachable if unanswered else RagexpError)(
            f"tracker.tracking_uri: cannot use MLflow store {scrub_url(uri)} ({scrub_url(str(err))})") from None
    OPENED[key] = (client, experiment_id)
    return client, experiment_id
