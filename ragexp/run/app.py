"""The Hydra side of `python -m ragexp`'s job: where it runs (a cluster worker's folder), what a
sweep left for it (sweep.json), what it prints, and its exit status; the job itself is
ragexp.run.job's, the same as `ragexp.evaluate`'s. A job of a sweep that fails is recorded and the
sweep goes on. `Jobs` is the task function Hydra calls, and what the command hands its jobs."""
from __future__ import annotations

import json
import logging
import math
import os
import socket
import sys
import time
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from ragexp.base.children import Child
from ragexp.base.redact import MaskedLog, scrub_url, written_config
from ragexp.config.overrides import point_name
from ragexp.errors import BAD_INPUT, GATE_FAILED, RUN_FAILED, RagexpError, UserCodeStopped
from ragexp.llm.estimate import Estimate
from ragexp.run.job import Job, TrackingFailed
from ragexp.store.run_folder import AUDIT_FILES, FAILURE_FILE, read_sweep
from ragexp.store.run_owner import FolderIncomplete, name_incomplete
from ragexp.run.report import summary
from ragexp.store.sweep_logging import SweepLogging

log = logging.getLogger("ragexp")


class Jobs:
    """`python -m ragexp`'s task function: Hydra calls it with each job's config, and it gives the
    job (`execute`) what the command holds for it beside the config, which Hydra has no parameter
    for: `early`, the MLflow logging helper the command started before Hydra composed a single
    run's config (ragexp.store.log_ahead.start_early), and `sweep_logging`, the logging helper of
    the sweep under way in this process (ragexp.store.sweep_logging).

    The sweep's helper is its callback's (ragexp.sweep.callbacks.SweepTracking), which Hydra makes
    from the config and whose only public meeting point with the task function is
    `Callback.on_job_start(config, task_function=...)`: there the sweep hands over its helper and
    how to end the sweep (`in_sweep`). With a launcher that runs jobs in other processes, that
    call is made there, with no helper to hand over: those jobs log themselves. `close`, at the
    command's end however it ended, stops a helper no job took and ends a sweep stopped before its
    end (an interrupt): a route from a job to MLflow that can be read from these parameters."""

    def __init__(self, early: Child | None = None):
        self.early = early
        self.sweep_logging: SweepLogging | None = None
        self.end_sweep: Callable[[], None] | None = None

    def __call__(self, cfg: DictConfig) -> float | None:
        return execute(cfg, self)

    def in_sweep(self, logging_helper: SweepLogging | None, end: Callable[[], None]) -> None:
        """The sweep's callback, as a job of the sweep starts: its helper for the job, and what ends
        the sweep if the command stops before the sweep's end."""
        self.sweep_logging, self.end_sweep = logging_helper, end

    def close(self) -> None:
        if self.early is not None:
            self.early.stop()
        end, self.end_sweep, self.sweep_logging = self.end_sweep, None, None
        if end is not None:
            end()


def sweep_info() -> dict:
    """In a multirun, what `ragexp.sweep.callbacks.SweepTracking` left in the sweep folder; else {}."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode


    hydra = HydraConfig.get()
    return read_sweep(hydra.sweep.dir) if hydra.mode == RunMode.MULTIRUN else {}


def job_tags(sweep: dict) -> dict[str, str]:
    """The tags a sweeper left for this job in sweep.json (a racing sweep: its round and question count)."""
    from hydra.core.hydra_config import HydraConfig

    return dict((sweep.get("job_tags") or {}).get(str(HydraConfig.get().job.num), {})) if sweep else {}


def swept_values(sweep: dict) -> str:
    """In a sweep, this job's swept values (`semantic · bm25`: its run's name, ragexp.config.overrides.point_name);
    else ""."""
    from hydra.core.hydra_config import HydraConfig

    swept = sweep.get("swept")
    if not swept:
        return ""
    hydra = HydraConfig.get()
    return point_name(OmegaConf.to_container(hydra.overrides.task, resolve=False), swept) or hydra.job.override_dirname


def execute(cfg: DictConfig, jobs: Jobs | None = None) -> float | None:
    """Runs one job (ragexp.run.job) with the logging helpers `jobs` holds; returns the configured
    objective (for sweepers that optimise it). A job of a multirun never exits: a failure is
    recorded (`record_failed_job`) and the sweep goes on."""
    from hydra.core.hydra_config import HydraConfig


    multirun = in_multirun()
    quiet = multirun and not cfg.get("verbose")  # a sweep's job: one line on the console, the rest in its log
    job, sweep = None, {}
    try:
        MaskedLog.install()
        log_file_errors_said_once()
        if quiet:
            quiet_console()
        run_where_launched()
        sweep = sweep_info()
        hydra = HydraConfig.get()
        job = Job(cfg, hydra.runtime.choices, swept=swept_values(sweep), tracking_uri=sweep.get("tracking_uri"),
                  parent_id=sweep.get("parent_run_id"), tags=job_tags(sweep), ahead=not multirun,
                  number=hydra.job.num if multirun else None, early=jobs.early if jobs and not multirun else None,
                  sweep_logging=jobs.sweep_logging if jobs and multirun else None)
        for line in name_incomplete(*outputs_folder(Path(hydra.runtime.output_dir))):
            print(f"ragexp: warning: {line}", file=sys.stderr)
        outcome = job.run(Path(hydra.runtime.output_dir))
        if isinstance(outcome, Estimate):  # dry_run=true: nothing judged, nothing to log
            print(outcome.summary())
            return None
        result, output_dir, failure, tracker = outcome.result, outcome.folder, outcome.failure, job.tracker
        say = log.info if multirun else print  # a sweep's job: into its log file (and the console when verbose)
        say(summary(result))
        say(f"results: {outcome.results_file}")
        if quiet:
            print(job_line(result, cfg.objective, output_dir))
        if result.traces and not tracker.logs_traces:
            print(f"ragexp: tracing=on with {tracker.where()}: no MLflow trace is written; the {len(result.traces)} "
                  f"traces are in {output_dir / 'traces.jsonl'} (log them with `python -m ragexp.track {output_dir}`)",
                  file=sys.stderr)
        run_id = job.log(outcome)
        say(f"tracked: {tracker.where()}" + (f", run {run_id}" if run_id else ""))
        link = tracker.ui_link(run_id) if run_id and not multirun else ""  # a sweep prints one link at its end
        if link:
            print(link)
    except TrackingFailed as err:
        if not multirun:
            print(f"ragexp: error: {err}", file=sys.stderr)
            sys.exit(RUN_FAILED)
        return record_failed_job(cfg, job, sweep, str(err), RUN_FAILED, not_logged=True)
    except RagexpError as err:
        code = RUN_FAILED if isinstance(err, (UserCodeStopped, FolderIncomplete)) else BAD_INPUT
        if not multirun:
            print(f"ragexp: error: {scrub_url(str(err))}", file=sys.stderr)
            sys.exit(code)
        return record_failed_job(cfg, job, sweep, str(err), code)
    except Exception as err:
        if not multirun:
            raise
        log.exception("job failed")
        return record_failed_job(cfg, job, sweep, f"{type(err).__name__}: {err}", RUN_FAILED)
    finally:
        if job is not None and job.tracker is not None:
            job.tracker.close()  # its helper process, when the job ended before logging
    if failure:
        print(f"ragexp: error: {failure}", file=sys.stderr)
        if not multirun:
            sys.exit(RUN_FAILED)
        return record_failed_job(cfg, job, sweep, failure, RUN_FAILED, logged=True)
    aggregates = result.aggregates
    if result.gate is not None and not result.gate.passed and not multirun:
        # in a sweep every job runs; the sweep exits with GATE_FAILED at its end (ragexp.sweep.callbacks)
        missed = [check.removesuffix(": FAILED") for check in result.gate.checks if check.endswith("FAILED")]
        print(f"ragexp: error: quality gate {result.gate.name!r} failed ({len(missed)} of {len(result.gate.checks)} "
              f"thresholds missed): {'; '.join(missed)}", file=sys.stderr)
        sys.exit(GATE_FAILED)
    return aggregates.get(cfg.objective)


def outputs_folder(folder: Path) -> tuple[Path, int]:
    """The outputs folder a run folder is in, and how deep: the first folder of its path under the
    directory the command runs in (outputs/DATE/TIME: outputs, 2; multirun/DATE/TIME/N: multirun,
    3; hydra.run.dir=run: run itself, 0); a folder elsewhere is its own."""
    try:
        parts = folder.resolve().relative_to(Path.cwd().resolve()).parts
    except ValueError:
        return folder, 0
    return (Path.cwd() / parts[0], len(parts) - 1) if parts else (folder, 0)


def log_file_errors_said_once() -> None:
    """A log file of the job (Hydra's ragexp.log in the run folder) that cannot be written (a full
    disk) is said once, in one line: Python's logging would print a traceback for every line lost."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and not isinstance(handler.handleError, SaidOnce):
            handler.handleError = SaidOnce(handler.baseFilename)  # type: ignore[method-assign]


class SaidOnce:
    """A log file handler's `handleError`: the first failure said on stderr, the others not."""

    def __init__(self, path: str):
        self.path, self.said = path, False

    def __call__(self, record: logging.LogRecord) -> None:
        if not self.said:
            self.said = True
            err = sys.exc_info()[1]
            print(f"ragexp: warning: cannot write the log {self.path} ({type(err).__name__}: {err}); its lines "
                  "are lost", file=sys.stderr)


def quiet_console() -> None:
    """The console handlers Hydra set up for this job let warnings and errors through, not the
    INFO lines (stage timings, the summary), which its log file keeps."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.setLevel(max(handler.level, logging.WARNING))


def job_line(result, objective: str, folder: Path) -> str:
    """A sweep's job in one line: its objective, its questions, its warnings and gate, where the rest is."""
    values = result.aggregates
    total, failed = values.get("total_questions", 0), values.get("failed_questions", 0)
    score = values.get(objective)
    shown = f"{objective} {score:.3f}" if isinstance(score, (int, float)) else f"no {objective}"
    warned = len(result.warned)
    gate = f"; gate {result.gate.name!r} {'passed' if result.gate.passed else 'FAILED'}" if result.gate else ""
    return (f"  -> {result.name}: {shown} over {total} questions ({failed} failed); {warned} rated warning{gate}; "
            f"details: {folder / 'ragexp.log'}")


def record_failed_job(cfg: DictConfig, job: Job | None, sweep: dict, reason: str, code: int,
                      logged: bool = False, not_logged: bool = False) -> float:
    """A job of a multirun that failed: `failure.json` in its folder (read by the sweep's end,
    `ragexp.sweep.callbacks`) and, unless its run is already `logged`, a FAILED run under the sweep's
    parent run with the reason. Returns NaN (a sweeper such as Optuna marks the trial failed)."""
    from hydra.core.hydra_config import HydraConfig


    tracker, name = (job.tracker, job.name) if job is not None else (None, None)
    started = job.started if job is not None else time.time()
    hydra = HydraConfig.get()
    # named as its run would have been (ragexp.run.job.run_name) when it failed before its run was named
    name = name or cfg.get("run_name") or scrub_url(swept_values(sweep)) or hydra.job.override_dirname or f"job {hydra.job.num}"
    reason = scrub_url(reason)
    print(f"ragexp: error: job {hydra.job.num} ({name}) failed: {reason}; the sweep goes on", file=sys.stderr)
    output_dir = Path(hydra.runtime.output_dir)
    record = {"name": name, "job": hydra.job.num, "reason": reason, "exit_code": code,
              **({"not_logged": True} if not_logged else {})}  # its results are whole: `ragexp.track` logs them
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / FAILURE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    except OSError as err:  # a full disk: the sweep still counts the job failed (it has no results.json)
        log.warning("job %s: its failure.json could not be written (%s)", name, err)
    if not (logged or not_logged) and tracker is not None:  # a folder not logged is logged whole by `ragexp.track`
        try:
            config = written_config(cfg)  # an interpolation that fails is logged unresolved
            tracker.log_failed(name, {**config, "run_name": name}, sweep.get("parent_run_id"), reason,  # type: ignore[dict-item]
                               files=run_files(output_dir), started=started, tags=job_tags(sweep))
        except Exception as err:  # noqa: BLE001 - the failure is on disk; the sweep goes on
            log.warning("job %s: its failure could not be logged to the tracker (%s)", name, scrub_url(str(err)))
    return math.nan


def run_where_launched() -> None:
    """A job reads and writes relative paths (datasets, cache.dir, ./mlflow.db) from the directory
    the command was started in, also in a worker process of a cluster launcher (a Ray worker
    starts where `ray start` ran). That directory must then exist on the worker's node."""
    from hydra.core.hydra_config import HydraConfig

    hydra = HydraConfig.get()
    launch_dir = hydra.runtime.cwd
    if hydra.job.chdir or os.getcwd() == launch_dir:
        return
    if not os.path.isdir(launch_dir):
        raise RagexpError(f"the sweep was launched from {launch_dir}, which does not exist on {socket.gethostname()}: "
                          "launch cluster sweeps from a directory on a filesystem shared with every node")
    os.chdir(launch_dir)


def in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.get().mode == RunMode.MULTIRUN


def run_files(output_dir: Path) -> tuple[Path, ...]:
    """The files of the run folder logged as artifacts: Hydra's record of the command-line overrides
    (so the run can be repeated) and the audit trail (ragexp.store.run_folder.write_audit)."""
    candidates = [output_dir / ".hydra" / "overrides.yaml", *(output_dir / name for name in AUDIT_FILES)]
    return tuple(path for path in candidates if path.exists())
