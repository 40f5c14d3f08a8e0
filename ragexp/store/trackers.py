"""Trackers: where a run's params, metrics and tables go. `tracker=mlflow` (default) or `none`."""
from __future__ import annotations

import copy
import hashlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Literal

from ragexp.base.redact import has_credentials, scrub_url
from ragexp.store.dead_runs import end_killed_sweeps, process_tags
from ragexp.store.folder_logging import log_folder
from ragexp.store.logged_record import record_logged
from ragexp.store.mlflow_client import experiment_client
from ragexp.store.provenance import git_commit
from ragexp.store.run_config import flatten, write_config
from ragexp.store.tracker_contract import Opened
from ragexp.store.ui_links import RANK, SHARED_VIEW, VERDICT, runs_view, runs_view_link
from ragexp.types import RunResult


class NoTracker:
    """Logs nothing (results.json and the console summary are still written)."""

    tracking_uri: str | None = None

    def given_store(self) -> dict | None:
        return None

    def opened(self) -> Opened | None:
        return None

    def in_experiment(self, name: str) -> NoTracker:
        return self

    def ahead(self) -> dict | None:
        return None

    def close(self) -> None:
        pass

    def ui_link(self, run_id: str | None = None, view: str | None = None) -> str:
        return ""

    def share_view(self, metrics: list[str], params: list[str], sweep: str | None = None,
                   placed_only: bool = False) -> str | None:
        return None

    logs_traces = False  # tracing=on: the run folder's traces.jsonl becomes MLflow traces

    def start_sweep(self, name: str, tags: dict[str, str]) -> str | None:
        return None

    def end_sweep(self, parent_id: str | None, results: dict, failed: bool = False, counts: dict | None = None,
                  tags: dict[str, str] | None = None) -> None:
        pass

    def log_run(self, result: RunResult, config: dict[str, Any], parent_id: str | None = None,
                started: float | None = None, failure: str | None = None) -> str | None:
        return None

    def log_failed(self, name: str, config: dict[str, Any], parent_id: str | None, reason: str,
                   files: tuple[Path, ...] = (), started: float | None = None,
                   tags: dict[str, str] | None = None) -> str | None:
        return None

    def log_folder(self, folder: Path, parent_id: str | None = None) -> str | None:
        return None

    def log_report(self, run_id: str | None, folder: Path) -> None:
        """A sweep's report folder as artifacts of its parent run (`report/`)."""

    def where(self) -> str:
        return "not tracked (tracker=none)"

    def imported(self) -> None:
        """The modules this tracker logs with, imported now (a sweep imports them before its grid)."""

    def store(self) -> str | None:
        """Where the runs go, for the jobs of a sweep to log next to their parent run."""
        return None

    def use_store(self, store: str | None) -> None:
        pass


class MlflowTracker(NoTracker):
    """One MLflow run per job (nested under the sweep's parent run in a multirun).
    `tracking_uri: null` keeps MLflow's own default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db.
    `question_records`: every question as a light trace of its run (its scores, the judge's
    rationale, the retrieved chunks), for MLflow's evaluation views; tracing=on logs full spans instead.
    `feedback`: the scores on each question's trace: `main` (those the overall score weighs, and
    hallucination: the columns MLflow's per-question view shows), `judge` (all the judge's) or `all`
    (also the answer metrics): ragexp.store.trace_store.scores_on_traces."""

    logs_traces = True

    def __init__(self, experiment: str, tracking_uri: str | None, question_records: bool,
                 feedback: Literal["main", "judge", "all"]):
        self.experiment = experiment
        self.tracking_uri = tracking_uri
        self.question_records = bool(question_records)
        self.feedback = feedback

    def client(self):
        """The MLflow client of this tracker's store, and its experiment (made if new). A process opens
        a store once: the jobs of a sweep in this process, and the sweep itself, share the client, and
        the runs left RUNNING by dead processes are looked for once."""
        import mlflow

        if self.tracking_uri:
            mlflow.set_tracking_uri(self.tracking_uri)
        client, self._experiment_id = experiment_client(mlflow.get_tracking_uri(), self.experiment)
        return client

    def given_store(self) -> dict | None:
        """The store as given (`tracker.tracking_uri`, else $MLFLOW_TRACKING_URI; None: MLflow's default
        store in `directory`, where the run was started), without importing MLflow."""
        return {"tracking_uri": self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None,
                "experiment": self.experiment, "directory": os.getcwd()}

    def opened(self) -> Opened | None:
        client = self.client()
        return Opened(client, self._experiment_id)

    def in_experiment(self, name: str) -> MlflowTracker:
        moved = copy.copy(self)
        moved.experiment = name
        return moved

    def ahead(self) -> dict | None:
        """A helper logs as this class does; a subclass may log otherwise, so it logs itself."""
        if type(self) is not MlflowTracker:
            return None
        return {"experiment": self.experiment, "tracking_uri": self.tracking_uri, "question_records": self.question_records,
                "feedback": self.feedback}

    def imported(self) -> None:
        import mlflow

        uri = self.tracking_uri or mlflow.get_tracking_uri()
        if uri.split(":", 1)[0].split("+")[0] in ("sqlite", "postgresql", "mysql", "mssql"):  # a SQL store
            import mlflow.store.tracking.sqlalchemy_store  # noqa: F401

    def where(self) -> str:
        """The store given (never MLflow's default in place of a store given but not yet opened)."""
        if self.tracking_uri:
            uri = self.tracking_uri
        else:
            import mlflow

            uri = mlflow.get_tracking_uri()
        return f"mlflow experiment {self.experiment!r} at {scrub_url(uri)}"

    def ui_link(self, run_id: str | None = None, view: str | None = None) -> str:
        """How to open run `run_id`'s evaluation view in MLflow's UI, or without one the experiment's
        runs table (empty before anything was logged), in the shared view `view` when given."""
        import mlflow

        experiment_id = getattr(self, "_experiment_id", None)
        return runs_view_link(mlflow.get_tracking_uri(), experiment_id, run_id, view) if experiment_id else ""

    def share_view(self, metrics: list[str], params: list[str], sweep: str | None = None,
                   placed_only: bool = False) -> str | None:
        """The runs table with these metric and param columns (`runs_view`) kept as a shared view of the
        experiment (an experiment tag, as MLflow's Share button keeps one); returns its key, named after
        its content (the same columns, the same key). `sweep`: the view shows only that sweep's runs,
        best first by their leaderboard rank, with its interval and verdict (ragexp.compare.report.log_places);
        `placed_only`: only those with a verdict (a racing sweep's last run of each configuration)."""
        experiment_id = getattr(self, "_experiment_id", None)
        if experiment_id is None:
            return None
        if sweep:
            objective = metrics[0] if metrics else ""
            view = runs_view([objective, f"{objective}_ci_low", f"{objective}_ci_high", *metrics[1:]] if objective else [],
                             params, sweep, RANK, (VERDICT,), placed_only)
        else:
            view = runs_view(metrics, params)
        key = "ragexp-" + hashlib.sha256(view.encode()).hexdigest()[:16]
        self.client().set_experiment_tag(experiment_id, SHARED_VIEW + key, view)
        return key

    def store(self) -> str | None:
        """None for a URI with credentials: it is not written to sweep.json; jobs find it as the launcher did."""
        import mlflow

        uri = self.tracking_uri or mlflow.get_tracking_uri()
        return None if has_credentials(uri) else uri

    def use_store(self, store: str | None) -> None:
        """A sweep job logs to its parent run's store, even on a worker (Ray, SLURM) that lacks the
        launching shell's $MLFLOW_TRACKING_URI. An explicit `tracker.tracking_uri` is the same in both."""
        self.tracking_uri = self.tracking_uri or store

    def start_sweep(self, name: str, tags: dict[str, str]) -> str | None:
        client = self.client()
        launcher = {"ragexp.host": socket.gethostname(), "ragexp.pid": str(os.getpid())}
        # the launcher's own pid when it is given (a helper process opens the sweep for it)
        run = client.create_run(self._experiment_id, run_name=name, tags={**launcher, **tags, "ragexp.role": "sweep"})
        end_killed_sweeps(client, self._experiment_id, tags.get("sweep_overrides"), run.info.run_id)
        return run.info.run_id

    def end_sweep(self, parent_id: str | None, results: dict, failed: bool = False, counts: dict | None = None,
                  tags: dict[str, str] | None = None) -> None:
        """Closes the sweep's parent run with the merged results and the job counts (`counts`:
        jobs_total, jobs_ok, jobs_failed; logged as metrics and `ragexp.<name>` tags) and `tags`."""
        if parent_id:
            from mlflow.entities import Metric

            client = self.client()
            client.log_text(parent_id, json.dumps(results, indent=2), "results.json")
            if counts:
                now = int(time.time() * 1000)
                client.log_batch(parent_id, metrics=[Metric(k, float(v), now, 0) for k, v in counts.items()])
                for key, value in counts.items():
                    client.set_tag(parent_id, f"ragexp.{key}", str(value))
            for key, value in (tags or {}).items():
                client.set_tag(parent_id, key, value)
            client.set_terminated(parent_id, "FAILED" if failed else "FINISHED")

    def log_report(self, run_id: str | None, folder: Path) -> None:
        if run_id and Path(folder).is_dir():
            client = self.client()
            client.log_artifacts(run_id, str(folder), "report")
            client.set_tag(run_id, "ragexp.report", "report/race.md" if (Path(folder) / "race.md").exists()
                           else "report/report.html")

    def log_failed(self, name: str, config: dict[str, Any], parent_id: str | None, reason: str,
                   files: tuple[Path, ...] = (), started: float | None = None,
                   tags: dict[str, str] | None = None) -> str | None:
        """A job that failed before it had results: a FAILED run with its params and the reason
        (tag `ragexp.failure_reason`, also logged as `failure.txt`); `tags`: the sweep's own for the
        job (a racing sweep's round and question count)."""
        from mlflow.entities import Param

        client = self.client()
        tags = {**(tags or {}), **process_tags(), "ragexp.status": "failed", "ragexp.failure_reason": scrub_url(reason)[:5000],
                "git_commit": git_commit()}
        if parent_id:
            tags["mlflow.parentRunId"] = parent_id
        start_ms = int(started * 1000) if started else None
        run_id = client.create_run(self._experiment_id, run_name=name, tags=tags, start_time=start_ms).info.run_id
        try:
            params = [Param(k[:250], v[:6000]) for k, v in flatten(config).items()]
            for start in range(0, len(params), 100):
                client.log_batch(run_id, params=params[start : start + 100])
            client.log_text(run_id, scrub_url(reason) + "\n", "failure.txt")
            for file in files:
                client.log_artifact(run_id, str(file))
        finally:
            client.set_terminated(run_id, "FAILED")
        return run_id

    def log_folder(self, folder: Path, parent_id: str | None = None) -> str | None:
        """Logs a run folder as one MLflow run (`ragexp.store.folder_logging.log_folder`) and records the
        run's id in it (`ragexp.store.logged_record`): a job logs its folder this way, and
        `python -m ragexp.track FOLDER` logs it later the same way."""
        import mlflow

        client = self.client()
        run_id = log_folder(client, self._experiment_id, folder, parent_id, self.question_records, self.feedback)
        record_logged(folder, run_id, self._experiment_id, mlflow.get_tracking_uri())
        return run_id

    def log_run(self, result: RunResult, config: dict[str, Any], parent_id: str | None = None,
                started: float | None = None, failure: str | None = None) -> str | None:
        """A run logged as a job logs it: its folder written (here a temporary one), then
        `log_folder`. `started`: when the run began (time.time()); `failure`: why it failed as a
        whole, if it did (a FAILED run tagged with the reason)."""
        import tempfile

        from ragexp.store.run_folder import write_results

        with tempfile.TemporaryDirectory(prefix="ragexp-run-") as tmp:
            folder = Path(tmp)
            write_results(result, folder, started, failure)
            write_config(folder, config)
            return self.log_folder(folder, parent_id)
