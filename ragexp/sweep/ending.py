"""A sweep's end, the same whether the sweep ends itself or `python -m ragexp.track SWEEP_FOLDER` ends it
later: the jobs' results merged, the job counts, the parent run closed with them (FAILED when a job
failed, tagged `ragexp.jobs_not_logged` with the jobs whose run folder is not in the store), and a
leaderboard. When the store cannot take the end (a server gone away), the sweep folder records it
(`sweep.json`'s `ended`): the next command against the store ends the parent run FAILED, tagged with
the jobs not logged (`ragexp.store.dead_runs`), and the leaderboard is made from the run folders."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from ragexp.base.progress import working
from ragexp.store.logged_record import JOBS_NOT_LOGGED, read_record
from ragexp.store.run_folder import FAILURE_FILE, RESULTS, RUN_META, SWEEP_FILE, read_sweep

log = logging.getLogger("ragexp")


def merged_results(sweep_dir: Path) -> tuple[dict, list[dict]]:
    """The jobs' results.json files merged, and the failed jobs' failure.json records; a failed
    job is listed in the merged results as {"status": "failed", "failure_reason": ...} (beside
    its aggregates if it had any)."""
    merged: dict = {}
    for results in sorted(sweep_dir.glob("*/results.json")):
        merged.update(json.loads(results.read_text()))
    failures = []
    for path in sorted(sweep_dir.glob(f"*/{FAILURE_FILE}"), key=lambda p: (len(p.parent.name), p.parent.name)):
        failure = json.loads(path.read_text())
        failures.append(failure)
        merged[failure["name"]] = {**merged.get(failure["name"], {}), "status": "failed",
                                   "failure_reason": failure["reason"]}
    return merged, failures


def job_folders(sweep_dir: Path) -> list[Path]:
    """The sweep's job folders, in job order."""
    found = [d for d in sweep_dir.iterdir() if (d / ".hydra").is_dir()] if sweep_dir.is_dir() else []
    return sorted(found, key=lambda d: (len(d.name), d.name))


def not_logged(sweep_dir: Path) -> list[Path]:
    """The job folders with results that are not in the store: meant for one (their `tracking.json`
    names it), complete (results.json, written last) and holding no MLflow run id."""
    folders = []
    for folder in job_folders(sweep_dir):
        record = read_record(folder)
        if record and not record.get("run_id") and (folder / RUN_META).is_file() and (folder / RESULTS).is_file():
            folders.append(folder)
    return folders


def job_name(folder: Path) -> str:
    """A job folder's run name (its results.json's), else its number."""
    try:
        return next(iter(json.loads((folder / "results.json").read_text())))
    except (OSError, ValueError, StopIteration):
        return f"job {folder.name}"


def counts_of(sweep_dir: Path, failures: list[dict]) -> dict[str, float]:
    jobs = len(job_folders(sweep_dir))
    return {"jobs_total": jobs, "jobs_ok": jobs - len(failures), "jobs_failed": len(failures)}


def close_parent(tracker, parent_id: str, merged: dict, failed: bool, counts: dict, unlogged: list[str]) -> None:
    """The parent run ended with the merged results and the counts; the jobs not logged as a tag."""
    tracker.end_sweep(parent_id, merged, failed=failed or bool(unlogged), counts=counts,
                      tags={JOBS_NOT_LOGGED: ", ".join(unlogged)[:5000]} if unlogged else None)


def record_end(sweep_dir: Path, failed: bool, unlogged: list[str], why: str) -> None:
    """The sweep ended, but its parent run could not be closed: said in sweep.json for the next
    command against the store (`ragexp.store.dead_runs.close_dead_runs`)."""
    info = read_sweep(sweep_dir)
    info["ended"] = {"at": time.time(), "failed": failed, "jobs_not_logged": unlogged, "not_closed_because": why}
    (sweep_dir / SWEEP_FILE).write_text(json.dumps(info, indent=2) + "\n")


def folder_leaderboard(sweep_dir: Path, failures: list[dict]) -> None:
    """The leaderboard made from the run folders (the store does not hold every job), printed and
    written to the sweep folder's report/; a failure to make it is said, never raised."""
    try:
        from ragexp.compare import leaderboard, report
        from ragexp.compare.explain import winner_lines
        from ragexp.compare.report import leaderboard_table
        from ragexp.store.reader import Selection
        from ragexp.sweep.racing.jobs import read_run

        runs = [read_run(folder, folder.name) for folder in job_folders(sweep_dir)
                if (folder / "results.json").is_file() and not failed_itself(folder)]
        if not runs:
            return
        selection = Selection(tracking_uri="", experiment="run folders", runs=runs,
                              failed_jobs=[f"{f['name']}: FAILED ({f['reason']})" for f in failures if not f.get("not_logged")])
        with working("building the sweep's report"):
            board = leaderboard.build(selection)
            files = report.write(board, sweep_dir / "report", with_plots=False)
        print(f"\nleaderboard from the run folders ({board.objective}, {board.level:.0%} CIs; report: {files['html']}):\n"
              + leaderboard_table(board).markdown() + "\n" + "\n".join(winner_lines(board)))
    except Exception as err:  # noqa: BLE001 - the jobs' results are on disk, listed with the error below
        log.warning("no leaderboard from the run folders (%s: %s)", type(err).__name__, err)


def failed_itself(folder: Path) -> bool:
    """Whether a job failed (its failure.json), other than by not being logged."""
    path = folder / FAILURE_FILE
    return path.is_file() and not json.loads(path.read_text()).get("not_logged")


def sweep_leaderboard(tracker, parent_id: str, sweep_dir: Path) -> str | None:
    """The sweep's leaderboard on its runs, once every job is logged and its parent run ended (the sweep's
    own end, or `python -m ragexp.track` later): a racing sweep's from its race (`race_places`), any
    other's from the store (`store_leaderboard`). Returns the key of the runs-table view its printed
    link opens (None when it could not be made)."""
    from ragexp.sweep.racing.report import read_state

    race = read_state(sweep_dir)
    return race_places(tracker, parent_id, sweep_dir, race) if race is not None else \
        store_leaderboard(tracker, parent_id, sweep_dir)


def race_places(tracker, parent_id: str, sweep_dir: Path, race: dict) -> str | None:
    """A racing sweep's report logged to its parent run (the sweeper made it), and its places on the
    runs as a basic sweep's (`ragexp.compare.report.log_places`): the survivors' last runs ranked, with
    the interval and verdict, by the race's final leaderboard (every question); each configuration
    dropped or failed before the end tagged with a verdict that says so (`dropped after round 1 (20 of
    40 questions): ...`), never ranked; a configuration's earlier rounds' runs get none. Returns the key
    of the view of one row per configuration (its runs with a verdict)."""
    try:
        from ragexp.compare.report import log_places
        from ragexp.sweep.racing.report import final_board, final_runs, out_of_the_race

        tracker.log_report(parent_id, sweep_dir / "report")
        opened = tracker.opened()
        if opened is None:
            return None
        logged = race_run_ids(opened.client, parent_id)

        def run_id(job: dict) -> str | None:
            return logged.get((str(job["config"]), str(job["round"])))

        out = {found: verdict for job, verdict in out_of_the_race(race) if (found := run_id(job))}
        runs = final_runs(race, run_id)
        board = final_board(runs, race["definition"]["settings"]) if runs else None
        log_places(opened.client, board, out)
        return tracker.share_view(*view_columns(board), sweep=parent_id, placed_only=True) if board else None
    except Exception as err:  # noqa: BLE001 - the race and its report are on disk
        log.warning("the race's places were not logged to its runs (%s: %s); its report is in %s",
                    type(err).__name__, err, sweep_dir / "report")
        return None


def race_run_ids(client, parent_id: str) -> dict[tuple[str, str], str]:
    """(configuration, round) -> the id of a race's child run of that job (its `ragexp.racing.*` tags;
    a failed job's run too; of a job run again, as a resumed race does after a kill, the latest)."""
    from mlflow.entities import ViewType

    from ragexp.store.ui_links import sweep_filter

    experiment = client.get_run(parent_id).info.experiment_id
    ids, token = {}, None
    while True:
        page = client.search_runs([experiment], sweep_filter(parent_id), ViewType.ACTIVE_ONLY, 1000,
                                  ["attributes.start_time ASC"], page_token=token)
        for run in page:
            tags = run.data.tags
            if "ragexp.racing.round" in tags:
                ids[(tags.get("ragexp.racing.configuration", ""), tags["ragexp.racing.round"])] = run.info.run_id
        token = page.token
        if not token:
            return ids


def store_leaderboard(tracker, parent_id: str, sweep_dir: Path) -> str | None:
    """The sweep's comparison report from the store (`python -m ragexp.compare`, in the sweep folder's
    report/ and logged to the parent run), printed, and the key of the runs-table view its printed
    link opens (`view_columns`; None when the report could not be made: the sweep is already saved,
    so a failure here is reported, not raised)."""
    try:
        from ragexp.compare import make
        from ragexp.compare.explain import winner_lines
        from ragexp.compare.report import leaderboard_table

        with working("building the sweep's report"):
            board, files, _ = make([parent_id], tracker.tracking_uri, out_dir=sweep_dir / "report",
                                   overwrite=True)  # the sweep's own report
        print(f"\nleaderboard ({board.objective}, {board.level:.0%} CIs; report: {files['html']}):\n"
              + leaderboard_table(board).markdown() + "\n" + "\n".join(winner_lines(board)))
        if board.selection.incomplete:
            print(f"INCOMPLETE sweep: {board.selection.incomplete}\n" + "\n".join(
                f"  failed: {job}" for job in board.selection.failed_jobs))
        return tracker.share_view(*view_columns(board), sweep=parent_id)
    except Exception as err:  # noqa: BLE001 - the report must never lose the sweep
        log.warning("no leaderboard for this sweep (%s: %s); make it with: python -m ragexp.compare %s",
                    type(err).__name__, err, parent_id)
        return None


KEY_METRICS = ("hallucination_rate", "avg_faithfulness", "mrr")  # beside the objective, the first two it has


def view_columns(board) -> tuple[list[str], list[str]]:
    """The runs-table columns the sweep's printed link opens with: its objective and the key metrics it
    has; the params that tell its runs apart (a swept component as its option, `retriever`: bm25, where
    the runs logged it, else as its class, `retriever._target_`)."""
    metrics = [board.objective] + [m for m in KEY_METRICS if m in board.metrics and m != board.objective][:2]
    logged = {key for entry in board.entries for key in entry.run.params}
    params = [c if c in logged else f"{c}._target_" for c in board.param_columns]
    return metrics, [p for p in params if p in logged]
