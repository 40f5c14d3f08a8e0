"""Runs read back from MLflow (for `ragexp.compare`, `ragexp.calibrate` and the racing sweeper): a
sweep's child runs, an experiment's runs, or run ids.

Each run comes with its params, metrics, tags, command-line overrides, its per-question
table (the `questions.json` artifact that `mlflow.log_table` wrote) and its aggregation spec
(`aggregates.json`), read from the artifacts directly so that no global tracking URI is needed."""
from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragexp.errors import RagexpError
from ragexp.store.question_tables import TABLE, TABLES, read_table, read_table_file

RUN_ID = re.compile(r"^[0-9a-f]{32}$")
SWEEP_ROLE = "ragexp.role"
PARENT = "mlflow.parentRunId"
AGGREGATES = "aggregates.json"  # how each aggregate is made (ragexp.store.run_folder.aggregates_json)


@dataclass
class Run:
    run_id: str
    name: str
    experiment_id: str
    start_time: int
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    overrides: list[str] = field(default_factory=list)
    table: Any = None  # pandas.DataFrame, one row per question
    aggregation: list[dict] | None = None  # aggregates.json's entries (ragexp.metrics.scoring.Aggregate); None: not logged
    folder: Path | None = None  # the run folder it was read from (a racing sweep's jobs), None for an MLflow run
    artifact_uri: str = ""  # where MLflow keeps the run's artifacts


@dataclass
class Selection:
    """The runs of one comparison, and the sweep (parent run) they belong to, if any."""

    tracking_uri: str
    experiment: str
    runs: list[Run]
    parent: Run | None = None
    notes: list[str] = field(default_factory=list)
    failed_jobs: list[str] = field(default_factory=list)  # "name: STATUS (reason)" of the jobs that did not finish
    incomplete: str = ""  # why the sweep is incomplete (failed, killed or missing jobs); "" when complete
    calibrations: list[Run] = field(default_factory=list)  # `python -m ragexp.calibrate` runs of these runs

    @property
    def title(self) -> str:
        if self.parent is not None:
            return f"{self.parent.name} (experiment {self.experiment!r})" + (" INCOMPLETE" if self.incomplete else "")
        return f"{len(self.runs)} runs of experiment {self.experiment!r}"


def tracking_uri(uri: str | None) -> str:
    """The store to read: `uri`, else $MLFLOW_TRACKING_URI, else MLflow's default (sqlite:///mlflow.db here).
    A local sqlite store that does not exist is an error, not a new empty store."""
    import mlflow

    if uri:
        mlflow.set_tracking_uri(uri)
    resolved = mlflow.get_tracking_uri()
    if resolved.startswith("sqlite:///"):
        path = Path(resolved[len("sqlite:///"):])
        if not path.exists():
            raise RagexpError(f"no MLflow store at {resolved} (no file {path.resolve()}); run in the folder where "
                              "you ran ragexp, or give --tracking-uri URI")
    return resolved


def client_for(uri: str | None):
    logging.getLogger("alembic").setLevel(logging.WARNING)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow

    resolved = tracking_uri(uri)
    return mlflow.MlflowClient(resolved), resolved


def to_run(info) -> Run:
    return Run(run_id=info.info.run_id, name=info.info.run_name or info.info.run_id[:8],
               experiment_id=info.info.experiment_id, start_time=info.info.start_time or 0,
               params=dict(info.data.params), metrics=dict(info.data.metrics), tags=dict(info.data.tags),
               artifact_uri=info.info.artifact_uri or "")


def all_experiment_ids(client) -> list[str]:
    return [e.experiment_id for e in client.search_experiments()]


def latest_sweep(client, experiment_ids: list[str]):
    runs = client.search_runs(experiment_ids, filter_string=f"tags.`{SWEEP_ROLE}` = 'sweep'",
                              order_by=["attributes.start_time DESC"], max_results=1) if experiment_ids else []
    return runs[0] if runs else None


def get_run(client, run_id: str, uri: str):
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id)
    except MlflowException:
        raise RagexpError(f"no run {run_id} in {uri}") from None


def children(client, parent) -> list:
    return client.search_runs([parent.info.experiment_id], filter_string=f"tags.`{PARENT}` = '{parent.info.run_id}'",
                              order_by=["attributes.start_time ASC"], max_results=5000)


def select(targets: list[str], uri: str | None = None, all_runs: bool = False) -> Selection:
    """targets: [] (the latest sweep in the store), [EXPERIMENT] (its latest sweep; every run with
    `all_runs`), [PARENT_RUN_ID] (that sweep) or [RUN_ID, RUN_ID, ...] (those runs)."""
    client, resolved = client_for(uri)
    parent = None
    if not targets:
        parent = latest_sweep(client, all_experiment_ids(client))
        if parent is None:
            raise RagexpError(f"no sweep found in {resolved}; run one (python -m ragexp -m ...) or name runs to compare")
        found = children(client, parent)
    elif len(targets) == 1 and not RUN_ID.match(targets[0]):
        experiment = client.get_experiment_by_name(targets[0])
        if experiment is None:
            names = ", ".join(sorted(e.name for e in client.search_experiments()))
            raise RagexpError(f"no experiment or run {targets[0]!r} in {resolved} (experiments: {names or 'none'})")
        if all_runs:
            found = [r for r in client.search_runs([experiment.experiment_id], max_results=5000)
                     if r.data.tags.get(SWEEP_ROLE) != "sweep"]
        else:
            parent = latest_sweep(client, [experiment.experiment_id])
            if parent is None:
                raise RagexpError(f"no sweep found in experiment {targets[0]!r} at {resolved}; "
                                  "compare all its runs with --all")
            found = children(client, parent)
    else:
        bad = [t for t in targets if not RUN_ID.match(t)]
        if bad:
            raise RagexpError(f"not a run id: {bad[0]!r} (give one experiment name, a sweep's parent run id, or run ids)")
        found = [get_run(client, t, resolved) for t in targets]
        if len(found) == 1:
            if found[0].data.tags.get(SWEEP_ROLE) != "sweep":
                raise RagexpError(f"run {targets[0]} is a single job: give two or more run ids, or a sweep's parent run id")
            parent = found[0]
            found = children(client, parent)
    notes: list[str] = []
    failed_jobs, incomplete = sweep_state(parent, found) if parent is not None else ([], "")
    runs = finished(found, notes if parent is None else [])
    if all_runs:
        runs = latest_per_configuration(runs, notes)
    anchor = parent or (found[0] if found else None)
    experiment = client.get_experiment(anchor.info.experiment_id).name if anchor else "?"
    selection = Selection(resolved, experiment, runs, to_run(parent) if parent else None, notes, failed_jobs, incomplete)
    load_tables(client, selection)
    selection.calibrations = calibrations(client, selection)
    if len(selection.runs) < 1:
        raise RagexpError(f"nothing to compare in {selection.title}: no finished run with a per-question table")
    return selection


def sweep_state(parent, found: list) -> tuple[list[str], str]:
    """The sweep's jobs that did not finish (with the reason a failed job logged), and why the sweep
    is incomplete: failed or killed jobs, a parent run killed or still running (jobs missing), or
    fewer job runs than the sweep counted at its end (`ragexp.jobs_total`)."""
    failed = []
    for info in found:
        if info.info.status != "FINISHED":
            reason = info.data.tags.get("ragexp.failure_reason") or info.data.tags.get("ragexp.resumed_by", "")
            if info.data.tags.get("ragexp.resumed_by") and not info.data.tags.get("ragexp.failure_reason"):
                reason = f"killed; its sweep was resumed by run {reason}"
            failed.append(f"{info.info.run_name} ({info.info.run_id[:8]}): {info.info.status}"
                          + (f" ({' '.join(reason.split())[:300]})" if reason else ""))
    reasons = []
    if failed:
        reasons.append(f"{len(failed)} of {len(found)} jobs did not finish")
    status = parent.info.status
    if status == "RUNNING":
        reasons.append("the sweep's parent run is RUNNING (the sweep is still running, or was killed): jobs may be missing")
    elif status == "KILLED":
        reasons.append("the sweep was killed before its end: jobs are missing")
    total = parent.data.tags.get("ragexp.jobs_total")
    if total and total.isdigit() and int(total) > len(found):
        reasons.append(f"{int(total) - len(found)} of its {total} jobs logged no run")
    return failed, "; ".join(reasons)


def calibrations(client, selection: Selection) -> list[Run]:
    """The calibration runs (`python -m ragexp.calibrate`) of the selected runs' judge: made on one
    of these runs, or on another run judged by the same judge, in the same experiments; the latest
    per judge and judged run."""
    ids = {r.run_id for r in selection.runs}
    judges = {r.tags.get("judge") for r in selection.runs} - {None}
    experiments = sorted({r.experiment_id for r in selection.runs})
    if not experiments:
        return []
    found = client.search_runs(experiments, filter_string=f"tags.`{SWEEP_ROLE}` = 'calibration'",
                               order_by=["attributes.start_time DESC"], max_results=200)
    latest: dict[str, Run] = {}
    for info in found:
        tags = info.data.tags
        if tags.get("ragexp.calibrates") in ids or tags.get("judge") in judges:
            latest.setdefault(tags.get("ragexp.calibrates", ""), to_run(info))
    return list(latest.values())


def finished(found: list, notes: list[str]) -> list[Run]:
    runs = []
    for info in found:
        if info.info.status != "FINISHED":
            notes.append(f"run {info.info.run_name} ({info.info.run_id[:8]}) is {info.info.status}: left out")
        else:
            runs.append(to_run(info))
    return runs


def latest_per_configuration(runs: list[Run], notes: list[str]) -> list[Run]:
    """One run per distinct configuration (params other than run_name): the latest."""
    latest: dict[tuple, Run] = {}
    for run in sorted(runs, key=lambda r: r.start_time):
        key = tuple(sorted((k, v) for k, v in run.params.items() if k != "run_name"))
        if key in latest:
            notes.append(f"run {latest[key].name} ({latest[key].run_id[:8]}) repeats the configuration of a later run: left out")
        latest[key] = run
    return sorted(latest.values(), key=lambda r: r.start_time)


def local_artifacts(run: Run) -> Path | None:
    """The folder of a run's artifacts when the store keeps them on this machine's disk (a local
    store, a server with a shared folder): they are read there, without a download."""
    from urllib.parse import unquote, urlparse

    uri = urlparse(run.artifact_uri)
    if uri.scheme not in ("file", "") or uri.netloc not in ("", "localhost"):
        return None
    folder = Path(unquote(uri.path))
    return folder if folder.is_dir() else None


def load_tables(client, selection: Selection) -> None:
    """Attach each run's per-question table, aggregation spec and overrides; runs without a table
    are left out. Artifacts on this machine's disk are read in place; others are downloaded."""
    kept = []
    with tempfile.TemporaryDirectory(prefix="ragexp-compare-") as tmp:
        for run in selection.runs:
            folder = local_artifacts(run)
            names = {p.name for p in folder.iterdir()} if folder else {a.path for a in client.list_artifacts(run.run_id)}

            def fetch(name: str, run: Run = run, folder: Path | None = folder) -> Path:
                return folder / name if folder else Path(client.download_artifacts(run.run_id, name, f"{tmp}/{run.run_id}"))
            if TABLE not in names:
                selection.notes.append(f"run {run.name} ({run.run_id[:8]}) has no {TABLE}: left out")
                continue
            run.table = read_table(fetch(TABLE))
            if AGGREGATES in names:
                run.aggregation = json.loads(fetch(AGGREGATES).read_text()).get("aggregates")
            else:
                selection.notes.append(f"run {run.name} ({run.run_id[:8]}) has no {AGGREGATES} (logged by an older "
                                       "ragexp): its aggregates are shown without confidence intervals")
            if "overrides.yaml" in names:
                from ragexp.base.yaml_text import read_yaml

                run.overrides = [str(o) for o in (read_yaml(fetch("overrides.yaml").read_text()) or [])]
            kept.append(run)
    selection.runs = kept


def question_table(target: str, tracking_uri: str | None = None):
    """A finished run's per-question table (a DataFrame): a run folder's (TABLES), or an MLflow
    run's `questions.json` artifact (`target` an MLflow run id)."""
    path = Path(target)
    if path.is_dir():
        found = next((path / t for t in TABLES if (path / t).is_file()), None)
        if found is None:
            raise RagexpError(f"{target}: no per-question table ({' or '.join(TABLES)}) in this folder")
        return read_table_file(found)
    if not RUN_ID.match(target):
        raise RagexpError(f"{target}: neither a run folder nor an MLflow run id (32 hex digits)")
    client, resolved = client_for(tracking_uri)
    get_run(client, target, resolved)  # a clear error for an unknown run
    if TABLE not in {a.path for a in client.list_artifacts(target)}:
        raise RagexpError(f"run {target} has no per-question table ({TABLE}); use a run logged by ragexp")
    with tempfile.TemporaryDirectory(prefix="ragexp-table-") as tmp:
        return read_table(Path(client.download_artifacts(target, TABLE, tmp)))

