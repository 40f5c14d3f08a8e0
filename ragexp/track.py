"""`python -m ragexp.track FOLDER [FOLDER ...]`: log run folders to MLflow after the fact.

A job writes everything its MLflow run holds into its folder first (results.json, aggregates.json,
config.yaml, run.json, the per-question table questions.json and the audit trail), then logs the
folder. When the store could not take it (a tracking server gone away mid-sweep), the job says so
and its folder stays complete; this command logs it later, exactly as the job would have: to the
store of `--tracking-uri`, else the sweep's (its folder's ../sweep.json), else $MLFLOW_TRACKING_URI;
nested under the sweep's parent run when that run is in the store. A store that cannot say whether
the parent run is there (unreachable, a server error) is asked again, then the command stops with
exit status 4, as `python -m ragexp` does when it cannot log: the folder is never logged unnested
because of a transient error."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ragexp.config.cli_settings import parse_args
from ragexp.errors import RUN_FAILED, RagexpError, StoreUnreachable
from ragexp.store.run_folder import RUN_META
from ragexp.store.trackers import MlflowTracker
from ragexp.store.lookup import run_absent


def sweep_of(folder: Path) -> dict:
    """What the sweep callback left beside a sweep job's folder (parent run id, tracking URI)."""
    path = folder.parent / "sweep.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragexp.track", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    parser.add_argument("folders", nargs="+", metavar="FOLDER", help="a run folder (outputs/DATE/TIME or multirun/DATE/TIME/N)")
    parser.add_argument("--tracking-uri", help="MLflow store (default: the sweep's, else $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    parser.add_argument("--experiment", default="ragexp", help="MLflow experiment (default ragexp)")
    args = parse_args(parser, argv)  # also tracker.tracking_uri=URI tracker.experiment=NAME
    status = 0
    for folder in map(Path, args.folders):
        if not (folder / RUN_META).is_file():
            print(f"ragexp.track: error: {folder}: not a run folder of this ragexp (no {RUN_META}); give the "
                  "folder a job wrote its results.json into", file=sys.stderr)
            status = 2
            continue
        sweep = sweep_of(folder)
        tracker = MlflowTracker(args.experiment, args.tracking_uri or sweep.get("tracking_uri"))
        try:
            parent = sweep.get("parent_run_id")
            if parent and not exists(tracker, parent):
                parent = None
            run_id = tracker.log_folder(folder, parent)
        except StoreUnreachable as err:
            print(f"ragexp.track: error: {err}", file=sys.stderr)
            return RUN_FAILED
        except RagexpError as err:
            print(f"ragexp.track: error: {err}", file=sys.stderr)
            status = 2
            continue
        print(f"{folder}: logged as run {run_id} to {tracker.where()}" + (f", under sweep run {parent}" if parent else ""))
    return status


LOOKUP_ATTEMPTS, LOOKUP_WAIT_S = 3, 1.0  # a store that did not answer: asked again after 1 s, then 2 s


def exists(tracker, run_id: str) -> bool:
    """Whether the store has the run: False only when the store answers that it has none
    (RESOURCE_DOES_NOT_EXIST); any other error is asked `attempts` times, then StoreUnreachable."""
    attempts = LOOKUP_ATTEMPTS
    for attempt in range(attempts):
        try:
            tracker.client().get_run(run_id)
            return True
        except Exception as err:  # noqa: BLE001 - sorted just below: absent, or the store did not answer
            if run_absent(err):
                return False
            last = err
        if attempt + 1 < attempts:
            time.sleep(LOOKUP_WAIT_S * 2 ** attempt)
    raise StoreUnreachable(f"cannot look up the sweep's parent run {run_id} in {tracker.where()} after {attempts} "
                           f"attempts ({type(last).__name__}: {str(last).splitlines()[0][:200]}); nothing was logged, "
                           "run the command again once the store answers")


if __name__ == "__main__":
    sys.exit(main())
