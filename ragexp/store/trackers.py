"""Trackers: where a run's params, metrics and tables go. `tracker=mlflow` (default) or `none`."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import signal
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ragexp.base.processes import alive, this_process
from ragexp.base.redact import has_credentials, masked, scrub_url
from ragexp.errors import RagexpError
from ragexp.store.provenance import git_commit
from ragexp.store.run_folder import AGGREGATES, AUDIT_FILES, MAP_FILES, RUN_META, TABLE
from ragexp.store.sqlite_store import database_of, opened
from ragexp.types import RunResult

log = logging.getLogger("ragexp")


def flatten(config: dict, prefix: str = "") -> dict[str, str]:
    """Nested config -> {"a.b.c": "value"}, masked (ragexp.base.redact.masked)."""
    flat = {}

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                flat[f"{prefix}{key}"] = json.dumps(value) if isinstance(value, list) else str(value)

    walk(masked(config), prefix)
    return flat


CONFIG = "config.yaml"


def write_config(folder: Path, config: dict[str, Any]) -> Path:
    """The job config in the run folder, masked (ragexp.base.redact: give it `written_config(cfg)`,
    which keeps `${oc.env:NAME}` unresolved): what the run's params and its config.yaml artifact are made of."""
    from ragexp.base.yaml_text import dump_yaml

    path = Path(folder) / CONFIG
    path.write_text(dump_yaml(masked(config)))
    return path


class NoTracker:
    """Logs nothing (results.json and the console summary are still written)."""

    def ui_link(self, run_id: str | None = None, view: str | None = None) -> str:
        return ""

    def share_view(self, metrics: list[str], params: list[str]) -> str | None:
        return None

    logs_traces = False  # tracing=on: the run folder's traces.jsonl becomes MLflow traces

    def start_sweep(self, name: str, tags: dict[str, str]) -> str | None:
        return None

    def end_sweep(self, parent_id: str | None, results: dict, failed: bool = False, counts: dict | None = None) -> None:
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


def runs_view_link(tracking_uri: str, experiment_id: str, run_id: str | None = None, view: str | None = None) -> str:
    """The line that opens a run's evaluation view (`run_id`: one row per question, with its answer,
    expected answer and assessments) or, for a sweep, the experiment's runs table. MLflow 3.17's UI opens an experiment on
    its GenAI overview unless the URL names a page: `runs/RUN/traces` is the run's Traces tab, its questions
    as rows with the judge's scores as columns and their averages above them (MLflow shows the first
    assessments up to ten columns in all, the others are one click away in *Columns*; clicking a row
    shows the judge's rationale); `runs?workflowType=machine_learning` the runs table (its experiment page reads that query
    parameter before the choice it keeps in localStorage). A tracking server serves the UI
    at its own address; a local store (sqlite:///mlflow.db, ./mlruns) needs `mlflow ui` over it.
    `view`: the key of a shared view of the runs table (`MlflowTracker.share_view`) the page opens in."""
    path = (f"#/experiments/{experiment_id}/runs/{run_id}/traces" if run_id
            else f"#/experiments/{experiment_id}/runs?workflowType=machine_learning"
            + (f"&{VIEW_KEY}={view}" if view else ""))
    address = ui_address(tracking_uri, path)
    return f"MLflow UI: {address}" if address else ""


def ui_address(tracking_uri: str, path: str) -> str:
    """Where MLflow's UI shows `path` (a `#/...` page) of the store `tracking_uri`: a tracking server's
    own address, or `mlflow ui` over a local store; "" on Databricks."""
    if tracking_uri.startswith(("http://", "https://")):
        return f"{scrub_url(tracking_uri.rstrip('/'))}/{path}"
    if tracking_uri.startswith("databricks"):
        return ""
    return f"mlflow ui --backend-store-uri {tracking_uri} --port 5000, then open http://127.0.0.1:5000/{path}"


VIEW_KEY = "viewStateShareKey"  # the URL parameter naming a shared view of MLflow's runs table
SHARED_VIEW = "mlflow.sharedViewState."  # + the key: the experiment tag holding the view, as MLflow's Share button keeps it


def runs_view(metrics: list[str], params: list[str]) -> str:
    """A runs-table view as MLflow's UI reads a shared one: the first metric, the params, then the other
    metrics as columns, in that order, sorted by the first metric, best first (sorting by a metric
    also lists a sweep's child runs as rows of their own)."""
    columns = [f"metrics.`{m}`" for m in metrics[:1]] + [f"params.`{p}`" for p in params] + \
        [f"metrics.`{m}`" for m in metrics[1:]]
    return json.dumps({"selectedColumns": columns, "columnOrder": columns, "orderByAsc": False, "searchFilter": "",
                       "orderByKey": f"metrics.`{metrics[0]}`" if metrics else "attributes.start_time"}, sort_keys=True)


def process_tags() -> dict[str, str]:
    """Which process logs a run (host, pid, start time), so that a later command can tell a run
    whose process is gone (killed while logging) from a live one (`close_dead_runs`)."""
    me = this_process()
    return {"ragexp.host": me["host"], "ragexp.pid": str(me["pid"]), "ragexp.process_started": str(me["started"])}


def still_running(client, run_id: str) -> bool:
    """Whether a run is RUNNING now. Asked again once its process is found gone: a process that ended
    its run and exited between the search and that finding is not one that was killed (a process
    that is gone ends nothing later)."""
    return client.get_run(run_id).info.status == "RUNNING"


def logger_of(tags: dict[str, str]) -> dict | None:
    """The process record a run's tags name, or None when they name none (or not wholly)."""
    pid, started = tags.get("ragexp.pid"), tags.get("ragexp.process_started")
    if not tags.get("ragexp.host") or not (pid or "").isdigit() or not (started or "").isdigit():
        return None
    return {"host": tags["ragexp.host"], "pid": int(pid), "started": int(started)}  # type: ignore[arg-type]


@contextmanager
def ended_if_stopped(client, run_id: str):
    """While a run is being logged: SIGTERM stops the process with SystemExit (in the main thread),
    and a stop (SystemExit, KeyboardInterrupt) ends the run KILLED, an error FAILED, so that no run
    is left RUNNING by a process that can still act."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stopped) if main else None
    try:
        yield
    except Exception:
        client.set_terminated(run_id, "FAILED")
        raise
    except BaseException:
        client.set_terminated(run_id, "KILLED")
        raise
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def stopped(signum, frame):
    raise SystemExit(128 + signum)


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


class MlflowTracker(NoTracker):
    """One MLflow run per job (nested under the sweep's parent run in a multirun).
    `tracking_uri: null` keeps MLflow's own default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db.
    `question_records`: every question as a light trace of its run (its scores, the judge's
    rationale, the retrieved chunks), for MLflow's evaluation views; tracing=on logs full spans instead."""

    logs_traces = True

    def __init__(self, experiment: str = "ragexp", tracking_uri: str | None = None, question_records: bool = True):
        self.experiment = experiment
        self.tracking_uri = tracking_uri
        self.question_records = bool(question_records)

    def client(self):
        """The MLflow client of this tracker's store, and its experiment (made if new). A process opens
        a store once: the jobs of a sweep in this process, and the sweep itself, share the client, and
        the runs left RUNNING by dead processes are looked for once."""
        logging.getLogger("alembic").setLevel(logging.WARNING)
        import mlflow

        if self.tracking_uri:
            mlflow.set_tracking_uri(self.tracking_uri)
        uri = mlflow.get_tracking_uri()
        key = (store_identity(uri), self.experiment)
        kept = OPENED.get(key)
        if kept is not None:
            client, self._experiment_id = kept
            return client
        try:
            client = opened(uri, lambda: RetryingLocked(mlflow.MlflowClient()), lambda c: c.search_experiments(max_results=1))
            experiment = client.get_experiment_by_name(self.experiment)
            self._experiment_id = experiment.experiment_id if experiment else client.create_experiment(
                self.experiment, artifact_location=artifacts_beside(uri), tags=EXPERIMENT_TAGS)
            if experiment and EXPERIMENT_KIND not in experiment.tags:  # made by an older ragexp or by hand
                client.set_experiment_tag(self._experiment_id, EXPERIMENT_KIND, EXPERIMENT_TAGS[EXPERIMENT_KIND])
            self.close_dead_runs(client)
        except RagexpError:
            raise
        except Exception as err:
            from ragexp.errors import StoreUnreachable

            unanswered = uri.startswith(("http://", "https://")) and getattr(err, "error_code", None) in (
                None, "INTERNAL_ERROR", "TEMPORARILY_UNAVAILABLE")  # no answer, or a server error: not the setting
            raise (StoreUnreachable if unanswered else RagexpError)(
                f"tracker.tracking_uri: cannot use MLflow store {uri} ({err})") from None
        OPENED[key] = (client, self._experiment_id)
        return client

    def imported(self) -> None:
        import mlflow

        uri = self.tracking_uri or mlflow.get_tracking_uri()
        if uri.split(":", 1)[0].split("+")[0] in ("sqlite", "postgresql", "mysql", "mssql"):  # a SQL store
            import mlflow.store.tracking.sqlalchemy_store  # noqa: F401

    def close_dead_runs(self, client) -> None:
        """Runs left RUNNING by a process of this host that no longer runs (killed while it logged
        them: the pid is gone, or taken by a newer process) are ended KILLED, tagged
        `ragexp.closed_by` with this process. A live process's runs, and runs logged on another host,
        stay as they are."""
        found = client.search_runs([self._experiment_id], "attributes.status = 'RUNNING'", max_results=1000)
        me = process_tags()
        for run in found:
            record = logger_of(run.data.tags)
            if record is None or alive(record) or not still_running(client, run.info.run_id):
                continue
            client.set_tag(run.info.run_id, "ragexp.closed_by", f"{me['ragexp.host']}:{me['ragexp.pid']}")
            client.set_terminated(run.info.run_id, "KILLED")
            log.warning("run %s (%s) was left RUNNING by process %s on %s, which is gone; marked KILLED",
                        run.info.run_id, run.info.run_name, record["pid"], record["host"])

    def where(self) -> str:
        import mlflow

        return f"mlflow experiment {self.experiment!r} at {scrub_url(mlflow.get_tracking_uri())}"

    def ui_link(self, run_id: str | None = None, view: str | None = None) -> str:
        """How to open run `run_id`'s evaluation view in MLflow's UI, or without one the experiment's
        runs table (empty before anything was logged), in the shared view `view` when given."""
        import mlflow

        experiment_id = getattr(self, "_experiment_id", None)
        return runs_view_link(mlflow.get_tracking_uri(), experiment_id, run_id, view) if experiment_id else ""

    def share_view(self, metrics: list[str], params: list[str]) -> str | None:
        """The runs table with these metric and param columns (`runs_view`) kept as a shared view of the
        experiment (an experiment tag, as MLflow's Share button keeps one); returns its key, named after
        its content (the same columns, the same key)."""
        experiment_id = getattr(self, "_experiment_id", None)
        if experiment_id is None:
            return None
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
        self.end_killed_sweeps(client, tags.get("sweep_overrides"), run.info.run_id)
        return run.info.run_id

    def end_killed_sweeps(self, client, overrides: str | None, successor: str) -> None:
        """A sweep killed before its end leaves its parent run RUNNING. Started again with the
        same overrides (it resumes from the stage cache), it marks that run KILLED, tagged
        `ragexp.resumed_by` with the new parent run, once this host has no process of it, and so
        every child run it left RUNNING (a job killed while it was being logged)."""
        runs = client.search_runs([self._experiment_id], "tags.`ragexp.role` = 'sweep' and attributes.status = 'RUNNING'")
        for run in runs:
            tags = run.data.tags
            pid = tags.get("ragexp.pid", "")
            launcher = {"host": tags.get("ragexp.host"), "pid": int(pid) if pid.isdigit() else 0}
            if (run.info.run_id != successor and tags.get("sweep_overrides") == overrides
                    and launcher["host"] == socket.gethostname() and not alive(launcher)
                    and still_running(client, run.info.run_id)):
                client.set_tag(run.info.run_id, "ragexp.resumed_by", successor)
                client.set_terminated(run.info.run_id, "KILLED")
                orphans = client.search_runs([self._experiment_id], f"tags.`mlflow.parentRunId` = '{run.info.run_id}' "
                                             "and attributes.status = 'RUNNING'")
                for child in orphans:
                    client.set_tag(child.info.run_id, "ragexp.resumed_by", successor)
                    client.set_terminated(child.info.run_id, "KILLED")
                log.warning("sweep run %s (%s) was killed before its end; marked KILLED, resumed by run %s",
                            run.info.run_id, run.info.run_name, successor)
                if orphans:
                    log.warning("and its %d child runs left RUNNING; marked KILLED", len(orphans))

    def end_sweep(self, parent_id: str | None, results: dict, failed: bool = False, counts: dict | None = None) -> None:
        """Closes the sweep's parent run with the merged results and the job counts (`counts`:
        jobs_total, jobs_ok, jobs_failed; logged as metrics and `ragexp.<name>` tags)."""
        if parent_id:
            from mlflow.entities import Metric

            client = self.client()
            client.log_text(parent_id, json.dumps(results, indent=2), "results.json")
            if counts:
                now = int(time.time() * 1000)
                client.log_batch(parent_id, metrics=[Metric(k, float(v), now, 0) for k, v in counts.items()])
                for key, value in counts.items():
                    client.set_tag(parent_id, f"ragexp.{key}", str(value))
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
        """Logs a run folder as one MLflow run: what `ragexp.store.run_folder.write_results` and `write_config`
        wrote there (params from config.yaml, metrics from results.json and run.json, the tags, every
        file as an artifact, the per-question table). A job logs its folder this way, and
        `python -m ragexp.track FOLDER` logs it later the same way (e.g. when the server was down)."""
        from mlflow.entities import Metric, Param
        from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

        from ragexp.base.yaml_text import read_yaml
        from ragexp.store.trace_store import log_traces

        folder = Path(folder)
        [(name, values)] = json.loads((folder / "results.json").read_text()).items()
        meta = json.loads((folder / RUN_META).read_text())
        config = read_yaml((folder / CONFIG).read_text()) or {}
        client = self.client()
        tags = {**(meta.get("tags") or {}),  # the sweep's own for the job (a racing sweep's round, question count)
                **process_tags(), "git_commit": meta.get("git_commit") or "unknown", "dataset_fingerprint": meta["dataset_fingerprint"],
                "ragexp_version": meta["ragexp_version"], "judge": meta["judge"],
                **{f"target.{key}": status for key, status in (meta.get("statuses") or {}).items()}}
        if meta.get("gate"):
            tags["gate"] = meta["gate"]
        if meta.get("process"):  # the job's process, beside the one logging it (ragexp.pid)
            tags["ragexp.job_pid"] = str(meta["process"]["pid"])
        if parent_id:
            tags["mlflow.parentRunId"] = parent_id
        failure = meta.get("failure")
        if failure:
            tags.update({"ragexp.status": "failed", "ragexp.failure_reason": scrub_url(failure)[:5000]})
        table = folder / TABLE
        if has_rows(table):  # the per-question table, as mlflow.log_table leaves it: the file and this tag
            tags[MLFLOW_LOGGED_ARTIFACTS] = json.dumps([{"path": TABLE, "type": "table"}])
        start_ms = int(meta["started"] * 1000) if meta.get("started") else None
        changed_since(client, self._experiment_id, name, meta["dataset_fingerprint"])
        run_id = client.create_run(self._experiment_id, run_name=name, tags=tags, start_time=start_ms).info.run_id
        with ended_if_stopped(client, run_id):
            params = [Param(k[:250], v[:6000]) for k, v in flatten(config).items()]
            now = int(time.time() * 1000)
            metrics = [Metric(k, float(v), now, 0) for k, v in folder_metrics(values, meta).items()]
            for batch_params, batch_metrics in batches(params, metrics):
                client.log_batch(run_id, params=batch_params, metrics=batch_metrics)
            client.log_inputs(run_id, datasets=[dataset_input(config, meta["dataset_fingerprint"])])
            files = [folder / f for f in (CONFIG, "results.json", AGGREGATES, *AUDIT_FILES, ".hydra/overrides.yaml",
                                          *MAP_FILES) if (folder / f).exists()]
            with staged(files + ([table] if MLFLOW_LOGGED_ARTIFACTS in tags else [])) as together:
                client.log_artifacts(run_id, str(together))  # one call: MLflow looks the run up once
            log_traces(client, folder, self._experiment_id, run_id, meta["judge"], retry_locked,
                       light=self.question_records, started=meta.get("started"))
        client.set_terminated(run_id, "FAILED" if failure else "FINISHED")
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


def not_logged(where: str, kind: str, error: str, folder: Path) -> str:
    """Why a run folder is not in the store, where its results are, and the command that logs it later."""
    said = scrub_url(error).splitlines()[0][:300] if error.strip() else ""
    return (f"could not log the run to {where} ({kind}: {said}); its results are on disk in {folder}: "
            f"log them later with `python -m ragexp.track {folder}`")


def has_rows(table: Path) -> bool:
    """Whether a run folder's per-question table holds a question."""
    return table.exists() and bool(json.loads(table.read_text())["data"])


def batches(params: list, metrics: list, most: int = 1000, most_params: int = 100):
    """Params and metrics in the fewest `log_batch` calls MLflow takes (at most 100 params and 1000
    entries a call)."""
    while params or metrics:
        these_params, params = params[:most_params], params[most_params:]
        room = most - len(these_params)
        these_metrics, metrics = metrics[:room], metrics[room:]
        yield these_params, these_metrics


@contextmanager
def staged(files: list[Path]):
    """A temporary folder holding `files` side by side (linked where the disk allows, else copied),
    for one `log_artifacts` call instead of one call a file."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ragexp-artifacts-") as tmp:
        for file in files:
            try:
                os.link(file, Path(tmp) / file.name)
            except OSError:
                shutil.copy2(file, Path(tmp) / file.name)
        yield Path(tmp)


def changed_since(client, experiment_id: str, name: str, fingerprint: str) -> None:
    """One line when the last run of this name in the experiment used another test set (another
    dataset_fingerprint: an MLflow evaluation dataset changed in place, a file edited): the two runs'
    scores then are not of the same questions. A name the store's search cannot take is let be."""
    try:
        earlier = client.search_runs([experiment_id], f"tags.`mlflow.runName` = '{name}'",
                                     order_by=["attributes.start_time DESC"], max_results=1)
    except Exception:  # noqa: BLE001 - a quote in the name, a store that cannot search: only this note is lost
        return
    before = earlier[0].data.tags.get("dataset_fingerprint") if earlier else None
    if before and before != fingerprint:
        log.warning("the test set changed since the last run named %s (%s, dataset_fingerprint %s, now %s): "
                    "its scores are not of the same questions", name, earlier[0].info.run_id, before, fingerprint)


def dataset_input(config: dict, digest: str):
    """The run's test set as an MLflow dataset input (the run page's Datasets): its name, ragexp's
    digest of its questions and corpus (the run's dataset_fingerprint: another version of the set
    gives another digest) and where it was read from."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    node = config.get("dataset") or {}
    where = {key: str(node[key]) for key in ("path", "name", "tracking_uri", "qrels") if node.get(key)}
    kind = "mlflow" if str(node.get("_target_", "")).endswith("MlflowDataset") else "local"
    return DatasetInput(Dataset(name=str(node.get("name") or "dataset"), digest=digest, source_type=kind,
                                source=json.dumps(where, sort_keys=True)),
                        tags=[InputTag("mlflow.data.context", "evaluation")])


def folder_metrics(values: dict, meta: dict) -> dict[str, float]:
    """What a run folder's results.json and run.json say to log as metrics."""
    numbers = {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    from ragexp.base.names import JOB_TIME, timing_key, work_key

    return {**numbers, **{work_key(k): v for k, v in (meta.get("work") or {}).items()},
            **{timing_key(k): v for k, v in (meta.get("timings_s") or {}).items()},
            **({JOB_TIME: meta["job_time_s"]} if meta.get("job_time_s") is not None else {})}


