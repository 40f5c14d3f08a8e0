"""`python -m ragexp.track FOLDER [FOLDER ...]`: log run folders to MLflow after the fact.

A job writes everything its MLflow run holds into its folder first (results.json, aggregates.json,
config.yaml, run.json, the per-question table questions.json and the audit trail), then logs the
folder. When the store could not take it (a tracking server gone away mid-sweep), the job says so
and its folder stays complete; this command logs it later, exactly as the job would have: to the
store of `--tracking-uri`, else the sweep's (its folder's ../sweep.json), else $MLFLOW_TRACKING_URI;
nested under the sweep's parent run when that run is in the store."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ragexp.cli_settings import parse_args


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
    from ragexp.errors import RagexpError
    from ragexp.store.run_folder import RUN_META
    from ragexp.store.trackers import MlflowTracker

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
        except RagexpError as err:
            print(f"ragexp.track: error: {err}", file=sys.stderr)
            status = 2
            continue
        print(f"{folder}: logged as run {run_id} to {tracker.where()}" + (f", under sweep run {parent}" if parent else ""))
    return status


def exists(tracker, run_id: str) -> bool:
    try:
        tracker.client().get_run(run_id)
        return True
    except Exception:  # noqa: BLE001 - not in this store: the run is logged on its own
        return False


if __name__ == "__main__":
    sys.exit(main())
