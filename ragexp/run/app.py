"""The job behind `python -m ragexp`: run the pipeline, write results, log to the tracker."""
from __future__ import annotations

import json
import logging
import math
import os
import socket
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ragexp.errors import BAD_INPUT, GATE_FAILED, RUN_FAILED, RagexpError
from ragexp.base.redact import scrub_url

log = logging.getLogger("ragexp")

DEFAULT_MAX_FAILED_SHARE = 0.5  # conf/config.yaml `max_failed_share`: more failed questions fail the run


def run_name(cfg: DictConfig) -> str:
    """`run_name` if set; in a sweep, the values of the swept keys (e.g. chunker=semantic,retriever=bm25);
    otherwise the chosen components joined (e.g. sample-recursive-minilm-dense-extractive; the reranker after
    the retriever when it is not none)."""
    from hydra.core.hydra_config import HydraConfig

    if cfg.get("run_name"):
        return str(cfg.run_name)
    hydra = HydraConfig.get()
    swept = sweep_info().get("swept")
    if swept:
        from ragexp.config.overrides import point_name

        return scrub_url(point_name(hydra.overrides.task, swept) or hydra.job.override_dirname)
    choices = hydra.runtime.choices
    own = choices.get("system") in (None, "pipeline")  # else: recorded outputs, your function or service
    chosen = [choices.get(g) for g in (("dataset", "chunker", "embedder", "retriever", "generator") if own
                                       else ("dataset", "system"))]
    if own and choices.get("reranker") not in (None, "none"):
        chosen.insert(4, choices.get("reranker"))  # after the retriever, when one reranks
    return "-".join(str(c) for c in chosen if c) or "run"


def sweep_info() -> dict:
    """In a multirun, what `ragexp.sweep.callbacks.SweepTracking` left in the sweep folder; else {}."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from ragexp.store.run_folder import read_sweep

    hydra = HydraConfig.get()
    return read_sweep(hydra.sweep.dir) if hydra.mode == RunMode.MULTIRUN else {}


def job_tags(sweep: dict) -> dict[str, str]:
    """The tags a sweeper left for this job in sweep.json (a racing sweep: its round and question count)."""
    from hydra.core.hydra_config import HydraConfig

    return dict((sweep.get("job_tags") or {}).get(str(HydraConfig.get().job.num), {})) if sweep else {}


def execute(cfg: DictConfig) -> float | None:
    """Runs one job; returns the configured objective (for sweepers that optimise it). A job of a
    multirun never exits: a failure is recorded (`record_failed_job`) and the sweep goes on."""
    from hydra.core.hydra_config import HydraConfig

    from ragexp.llm.estimate import Estimate
    from ragexp.config.build import build
    from ragexp.run.pipeline import run
    from ragexp.run.report import summary
    from ragexp.store.run_folder import write_results
    from ragexp.store.trackers import write_config

    from ragexp.config.validation import validate

    started, multirun = time.time(), in_multirun()
    tracker, sweep, name = None, {}, None
    try:
        validate(cfg)  # every setting checked, every problem reported at once, before any work
        run_where_launched()
        max_share = max_failed_share(cfg)
        tracker = build(cfg.tracker)
        sweep = sweep_info()
        tracker.use_store(sweep.get("tracking_uri"))
        name = run_name(cfg)
        result = run(cfg, name)
        if isinstance(result, Estimate):  # dry_run=true: nothing judged, nothing to log
            print(result.summary())
            return None
        output_dir = Path(HydraConfig.get().runtime.output_dir)
        failure = run_failure(result, max_share)
        results_file = write_results(result, output_dir, started, failure, job_tags(sweep))
        # the logged config re-runs this job as it is: its name included
        write_config(output_dir, {**OmegaConf.to_container(cfg, resolve=True), "run_name": result.name})  # type: ignore[dict-item]
        print(summary(result))
        print(f"results: {results_file}")
        if result.traces and not tracker.logs_traces:
            print(f"ragexp: tracing=on with {tracker.where()}: no MLflow trace is written; the {len(result.traces)} "
                  f"traces are in {output_dir / 'traces.jsonl'} (log them with `python -m ragexp.track {output_dir}`)",
                  file=sys.stderr)
        run_id = log_folder(tracker, output_dir, sweep.get("parent_run_id"))
        print(f"tracked: {tracker.where()}" + (f", run {run_id}" if run_id else ""))
        if run_id and not multirun and tracker.ui_link():  # a sweep prints one link at its end
            print(tracker.ui_link())
    except TrackingFailed as err:
        if not multirun:
            print(f"ragexp: error: {err}", file=sys.stderr)
            sys.exit(RUN_FAILED)
        return record_failed_job(cfg, tracker, sweep, name, str(err), RUN_FAILED, started)
    except RagexpError as err:
        if not multirun:
            print(f"ragexp: error: {scrub_url(str(err))}", file=sys.stderr)
            sys.exit(BAD_INPUT)
        return record_failed_job(cfg, tracker, sweep, name, str(err), BAD_INPUT, started)
    except Exception as err:
        if not multirun:
            raise
        log.exception("job failed")
        return record_failed_job(cfg, tracker, sweep, name, f"{type(err).__name__}: {err}", RUN_FAILED, started,
                                 logged=False)
    if failure:
        print(f"ragexp: error: {failure}", file=sys.stderr)
        if not multirun:
            sys.exit(RUN_FAILED)
        return record_failed_job(cfg, tracker, sweep, result.name, failure, RUN_FAILED, started, logged=True)
    aggregates = result.aggregates
    if result.gate is not None and not result.gate.passed and not multirun:
        # in a sweep every job runs; the sweep exits with GATE_FAILED at its end (ragexp.sweep.callbacks)
        missed = [check.removesuffix(": FAILED") for check in result.gate.checks if check.endswith("FAILED")]
        print(f"ragexp: error: quality gate {result.gate.name!r} failed ({len(missed)} of {len(result.gate.checks)} "
              f"thresholds missed): {'; '.join(missed)}", file=sys.stderr)
        sys.exit(GATE_FAILED)
    return aggregates.get(cfg.get("objective", "overall_score"))


def log_folder(tracker, folder: Path, parent_id: str | None) -> str | None:
    """The run folder logged to the tracker; when the store cannot take it (a server gone away), one
    error saying where the results are and the command that logs them later."""
    try:
        return tracker.log_folder(folder, parent_id)
    except Exception as err:  # noqa: BLE001 - any failure of the store: the results are safe on disk
        raise TrackingFailed(f"could not log the run to {tracker.where()} ({type(err).__name__}: "
                             f"{scrub_url(str(err)).splitlines()[0][:300]}); its results are on disk in {folder}: "
                             f"log them later with `python -m ragexp.track {folder}`") from None


class TrackingFailed(Exception):
    """The run measured and wrote its folder, but the tracker could not take it."""


def max_failed_share(cfg: DictConfig) -> float:
    share = cfg.get("max_failed_share", DEFAULT_MAX_FAILED_SHARE)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise RagexpError(f"max_failed_share must be a number between 0 and 1 (the share of questions that may "
                          f"fail before the run counts as failed), got {share!r}")
    return float(share)


def run_failure(result, max_share: float) -> str | None:
    """Why the run failed as a whole, or None: every question failed and nothing was measured, or
    of the questions with something to judge (all but retrieval-only ones), all or more than
    `max_share` failed."""
    judgeable = [r for r in result.questions if r.status != "retrieved"]
    failed = [r for r in judgeable if r.failed]
    aggregates = result.aggregates
    total = aggregates["total_questions"]
    retrieval_scored = total - aggregates.get("retrieval_excluded_questions", 0)
    first = f" (first reason: {failed[0].failure})" if failed else ""
    if total and aggregates.get("failed_questions") == total and not retrieval_scored:
        return f"all {total} questions failed and nothing was measured{first}"
    if judgeable and len(failed) == len(judgeable):
        return f"run failed: all {len(failed)} questions failed{first}"
    if judgeable and len(failed) / len(judgeable) > max_share:
        return (f"run failed: {len(failed)} of {len(judgeable)} questions failed, more than "
                f"max_failed_share={max_share:g}{first}")
    return None


def record_failed_job(cfg: DictConfig, tracker, sweep: dict, name: str | None, reason: str, code: int,
                      started: float, logged: bool = False) -> float:
    """A job of a multirun that failed: `failure.json` in its folder (read by the sweep's end,
    `ragexp.sweep.callbacks`) and, unless its run is already `logged`, a FAILED run under the sweep's
    parent run with the reason. Returns NaN (a sweeper such as Optuna marks the trial failed)."""
    from hydra.core.hydra_config import HydraConfig

    from ragexp.store.run_folder import FAILURE_FILE

    hydra = HydraConfig.get()
    name = name or cfg.get("run_name") or hydra.job.override_dirname or f"job {hydra.job.num}"
    reason = scrub_url(reason)
    print(f"ragexp: error: job {hydra.job.num} ({name}) failed: {reason}; the sweep goes on", file=sys.stderr)
    output_dir = Path(hydra.runtime.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    record = {"name": name, "job": hydra.job.num, "reason": reason, "exit_code": code}
    (output_dir / FAILURE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    if not logged and tracker is not None:
        try:
            try:
                config = OmegaConf.to_container(cfg, resolve=True)
            except Exception:  # noqa: BLE001 - an interpolation that fails is logged unresolved
                config = OmegaConf.to_container(cfg, resolve=False)
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
    from ragexp.store.run_folder import AUDIT_FILES

    candidates = [output_dir / ".hydra" / "overrides.yaml", *(output_dir / name for name in AUDIT_FILES)]
    return tuple(path for path in candidates if path.exists())
