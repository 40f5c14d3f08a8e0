"""`python -m ragexp.track FOLDER [FOLDER ...]`: log run folders to MLflow after the fact.

A job writes everything its MLflow run holds into its folder first (results.json, aggregates.json,
config.yaml, run.json, the per-question table questions.json and the audit trail), and the store it
was given (tracking.json), then logs the folder. When the store could not take it (a tracking server
gone away mid-sweep), the job says so and its folder stays complete; this command logs it later,
exactly as the job would have: to the store of `--tracking-uri`, else the one the folder records
(never a new store in its place: a recorded URI with credentials, which are never written, asks for
`--tracking-uri` again), else the sweep's (its folder's ../sweep.json), else $MLFLOW_TRACKING_URI;
nested under the sweep's parent run when that run is in the store. A store that cannot say whether
the parent run is there (unreachable, a server error) is asked again, then the command stops with
exit status 4, as `python -m ragexp` does when it cannot log: the folder is never logged unnested
because of a transient error.

A sweep's folder (it holds sweep.json): every job not yet logged is logged under the sweep's parent
run, which then ends as the sweep would have ended it (results, job counts, its leaderboard).

A folder whose run ended without its results.json (killed, a full disk: ragexp.store.run_owner.
ended_without_results) is incomplete: said in one line, exit status 4, nothing logged."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ragexp.base.redact import scrub_url
from ragexp.config.cli_settings import parse_args
from ragexp.errors import RUN_FAILED, RagexpError, StoreUnreachable
from ragexp.store.logged_record import read_record, store_of
from ragexp.store.run_folder import FAILURE_FILE, RESULTS, RUN_META, SWEEP_FILE, read_sweep
from ragexp.store.run_owner import OWNER, FolderIncomplete, ended_without_results, incomplete_message, owner_of
from ragexp.store.trackers import MlflowTracker
from ragexp.store.lookup import run_absent


def sweep_of(folder: Path) -> dict:
    """What the sweep callback left beside a sweep job's folder (parent run id, tracking URI)."""
    path = folder.parent / "sweep.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragexp.track", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    parser.add_argument("folders", nargs="+", metavar="FOLDER",
                        help="a run folder (outputs/DATE/TIME or multirun/DATE/TIME/N) or a sweep's (multirun/DATE/TIME)")
    parser.add_argument("--tracking-uri", help="MLflow store (default: the one the folder records, else the sweep's, "
                        "else $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    parser.add_argument("--experiment", help="MLflow experiment (default: the one the folder records, else ragexp)")
    args = parse_args(parser, argv)  # also tracker.tracking_uri=URI tracker.experiment=NAME
    status = 0
    for folder in map(Path, args.folders):
        try:
            if (folder / SWEEP_FILE).is_file() and not (folder / RUN_META).is_file():
                track_sweep(folder, args.tracking_uri, args.experiment)
                continue
            if not (folder / RESULTS).is_file():
                unfinished(folder)
            if not (folder / RUN_META).is_file():
                raise RagexpError(f"{folder}: not a run folder of this ragexp (no {RUN_META}); give the folder a job "
                                  "wrote its results.json into, or a sweep's folder (with its sweep.json)")
            sweep = sweep_of(folder)
            tracker = tracker_for(folder, args.tracking_uri, args.experiment, sweep.get("tracking_uri"))
            parent = sweep.get("parent_run_id")
            if parent and not exists(tracker, parent):
                parent = None
            run_id = tracker.log_folder(folder, parent)
        except StoreUnreachable as err:
            print(f"ragexp.track: error: {scrub_url(str(err))}", file=sys.stderr)
            return RUN_FAILED
        except FolderIncomplete as err:
            print(f"ragexp.track: error: {err}", file=sys.stderr)
            status = RUN_FAILED  # the run failed: nothing to log, nothing to fix in the command
            continue
        except RagexpError as err:
            print(f"ragexp.track: error: {scrub_url(str(err))}", file=sys.stderr)
            status = max(status, 2)
            continue
        print(f"{folder}: logged as run {run_id} to {tracker.where()}" + (f", under sweep run {parent}" if parent else ""))
    return status


def unfinished(folder: Path) -> None:
    """A folder without results.json: FolderIncomplete when its run ended without it (see
    ragexp.store.run_owner.ended_without_results), RagexpError while a live run writes it; else
    nothing (it is no run folder: said next)."""
    record = ended_without_results(folder)
    if record is not None:
        raise FolderIncomplete(incomplete_message(folder, record))
    holder = owner_of(folder / OWNER)
    if holder is not None:
        raise RagexpError(f"{folder}: its run is still under way (process {holder.get('pid')} on {holder.get('host')}); "
                          "it logs itself when it ends")


def tracker_for(folder: Path, given: str | None, experiment: str | None, sweep_store: str | None) -> MlflowTracker:
    """The tracker of the store and experiment `folder` is meant for (`ragexp.store.logged_record.store_of`)."""
    from ragexp.config.build import from_yaml

    return from_yaml("tracker/mlflow", experiment=experiment or read_record(folder).get("experiment") or "ragexp",
                     tracking_uri=store_of(folder, given) or sweep_store)


def track_sweep(sweep_dir: Path, given: str | None, experiment: str | None) -> None:
    """Every job of the sweep not yet logged, logged under its parent run; then the parent ended as
    the sweep would have (ragexp.sweep.ending) and its leaderboard made."""
    from ragexp.sweep import ending

    info = read_sweep(sweep_dir)
    jobs = ending.job_folders(sweep_dir)
    if not jobs:
        raise RagexpError(f"{sweep_dir}: a sweep folder without any job folder; nothing to log")
    tracker = tracker_for(jobs[0], given, experiment, info.get("tracking_uri"))
    parent = info.get("parent_run_id")
    if parent and not exists(tracker, parent):
        raise RagexpError(f"{sweep_dir}: the sweep's run {parent} is not in {tracker.where()}; give the store it was "
                          "logged to with --tracking-uri URI, or log its jobs one by one")
    missing = ending.not_logged(sweep_dir)
    if not missing and "ended" not in info:
        print(f"{sweep_dir}: every job is logged and the sweep ended its run {parent} itself; nothing to do")
        return
    for folder in missing:
        run_id = tracker.log_folder(folder, parent)
        failure = folder / FAILURE_FILE
        if failure.is_file() and json.loads(failure.read_text()).get("not_logged"):
            failure.unlink()  # it failed only to be logged
        print(f"{folder}: logged as run {run_id} to {tracker.where()}" + (f", under sweep run {parent}" if parent else ""))
    if not parent:
        return
    merged, failures = ending.merged_results(sweep_dir)
    if merged:
        (sweep_dir / "results.json").write_text(json.dumps(merged, indent=2) + "\n")
    ending.close_parent(tracker, parent, merged, bool(failures), ending.counts_of(sweep_dir, failures),
                        [ending.job_name(f) for f in ending.not_logged(sweep_dir)])
    info.pop("ended", None)
    (sweep_dir / SWEEP_FILE).write_text(json.dumps(info, indent=2) + "\n")
    print(f"{sweep_dir}: sweep run {parent} ended {'FAILED' if failures else 'FINISHED'} in {tracker.where()}"
          + (f" ({len(failures)} jobs failed)" if failures else ""))
    view = ending.sweep_leaderboard(tracker, parent, sweep_dir)
    if tracker.ui_link():
        print(tracker.ui_link(view=view))


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
