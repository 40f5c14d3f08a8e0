"""What a run folder says of its logging (`tracking.json`): the store it was given, written before it
is logged, and its MLflow run once logged (by the run, by a logging helper or by `python -m
ragexp.track`); why it is not in the store, and the command that logs it later to that store.

A store's URI is written with its credentials masked (`http://***@host`): a folder meant for such a
store is logged later with `--tracking-uri` given again. A store given as none (no
`tracker.tracking_uri`, no $MLFLOW_TRACKING_URI) is MLflow's default in the folder the run was
started in (`directory`)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ragexp.base.redact import has_credentials, scrub_url
from ragexp.errors import RagexpError

TRACKING_FILE = "tracking.json"
JOBS_NOT_LOGGED = "ragexp.jobs_not_logged"  # a sweep's parent run's tag: the jobs whose folder is not in the store


def read_record(folder: Path) -> dict:
    """The folder's record ({} when it has none: a run of tracker=none, or of an older ragexp)."""
    path = Path(folder) / TRACKING_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def write_record(folder: Path, record: dict) -> None:
    path = Path(folder) / TRACKING_FILE
    partial = path.with_name(f".{TRACKING_FILE}.{os.getpid()}")
    partial.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)  # whole or absent: a reader never sees half a record


def record_store(folder: Path, given: dict | None) -> None:
    """Before the folder is logged: the store the tracker was given (`Tracker.given_store`: None for a
    tracker that logs nothing, then no record)."""
    if given is None:
        return
    uri = given.get("tracking_uri")
    write_record(folder, {"tracking_uri": scrub_url(uri) if uri else None, "credentials_masked": has_credentials(uri or ""),
                          "experiment": given.get("experiment"), "directory": given.get("directory"),
                          "run_id": None})


def record_logged(folder: Path, run_id: str, experiment_id: str, uri: str) -> None:
    """Once logged: the run's id, its experiment's and the store (resolved: MLflow's default named)."""
    record = read_record(folder)
    write_record(folder, {**record, "tracking_uri": scrub_url(uri), "credentials_masked": has_credentials(uri or ""),
                          "run_id": run_id, "experiment_id": experiment_id})


def store_of(folder: Path, given: str | None = None) -> str | None:
    """The store a folder is meant for: `given` (--tracking-uri), else the one it recorded; a recorded
    URI whose credentials were masked cannot be used (RagexpError, one line); None when it recorded
    none (MLflow's default, or a folder of an older ragexp)."""
    if given:
        return given
    record = read_record(folder)
    uri = record.get("tracking_uri")
    if uri and record.get("credentials_masked"):
        raise RagexpError(f"{folder}: its store {uri} needs credentials, which are never written: give the URI "
                          "again with --tracking-uri URI")
    if uri:
        return uri
    if record.get("directory") and record.get("experiment") is not None:
        return default_store(Path(record["directory"]))
    return None


def default_store(directory: Path) -> str:
    """MLflow's default store as seen from `directory` (where a run given no store was started)."""
    import mlflow

    here, was = os.getcwd(), os.environ.pop("MLFLOW_TRACKING_URI", None)
    try:
        os.chdir(directory)
        return mlflow.get_tracking_uri()  # a sqlite:/// path made absolute, or ./mlruns when it holds runs
    finally:
        os.chdir(here)
        if was is not None:
            os.environ["MLFLOW_TRACKING_URI"] = was


def recovery(folder: Path, where: str) -> str:
    """The command that logs `folder` later, to the store it is meant for (`where`, in words)."""
    record = read_record(folder)
    uri = record.get("tracking_uri")
    if uri and record.get("credentials_masked"):
        return f"`python -m ragexp.track {folder} --tracking-uri URI` (URI: {uri} with its credentials)"
    if uri:
        return f"`python -m ragexp.track {folder} --tracking-uri {uri}`"
    return f"`python -m ragexp.track {folder}` (it logs to {where.split(' at ', 1)[-1]}, as recorded in {TRACKING_FILE})"


def not_logged(where: str, kind: str, error: str, folder: Path) -> str:
    """Why a run folder is not in the store, where its results are, and the command that logs it later
    to that store."""
    said = scrub_url(error).splitlines()[0][:300] if error.strip() else ""
    return (f"could not log the run to {where} ({kind}: {said}); its results are on disk in {folder}: "
            f"log them later with {recovery(folder, where)}")


def never_logged(folder: Path) -> RagexpError:
    """A folder asked for its MLflow run that has none: one line saying how to log it."""
    record = read_record(folder)
    if not record:
        return RagexpError(f"{folder}: this run folder was never logged to MLflow (it has no {TRACKING_FILE}: a run of "
                           f"tracker=none or of an older ragexp); log it with `python -m ragexp.track {folder}`")
    return RagexpError(f"{folder}: this run folder was never logged to MLflow (no run id in its {TRACKING_FILE}); "
                       f"log it with {recovery(folder, 'its store')}")
