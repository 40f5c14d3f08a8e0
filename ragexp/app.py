"""The job behind `python -m ragexp`: run the pipeline, write results, log to the tracker."""
from __future__ import annotations

import logging
import os
import socket
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ragexp.errors import RagexpError

log = logging.getLogger("ragexp")

GATE_FAILED = 3  # exit status of a run (or sweep) that missed a quality-gate threshold


def run_name(cfg: DictConfig) -> str:
    """`run_name` if set; in a sweep, the values of the swept keys (e.g. chunker=semantic,retriever=bm25);
    otherwise the chosen components joined (e.g. sample-recursive-minilm-dense-extractive)."""
    from hydra.core.hydra_config import HydraConfig

    if cfg.get("run_name"):
        return str(cfg.run_name)
    hydra = HydraConfig.get()
    swept = sweep_info().get("swept")
    if swept:
        values = dict(o.split("=", 1) for o in hydra.overrides.task if "=" in o)
        return ",".join(f"{k}={values[k]}" for k in swept if k in values) or hydra.job.override_dirname
    choices = hydra.runtime.choices
    chosen = [choices.get(g) for g in ("dataset", "chunker", "embedder", "retriever", "generator")]
    return "-".join(str(c) for c in chosen if c) or "run"


def sweep_info() -> dict:
    """In a multirun, what `ragexp.callbacks.SweepTracking` left in the sweep folder; else {}."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from ragexp.callbacks import read_sweep

    hydra = HydraConfig.get()
    return read_sweep(hydra.sweep.dir) if hydra.mode == RunMode.MULTIRUN else {}


def execute(cfg: DictConfig) -> float | None:
    """Runs one job; returns the configured objective (for sweepers that optimise it)."""
    from hydra.core.hydra_config import HydraConfig

    from ragexp.llm.estimate import Estimate
    from ragexp.pipeline import build, run
    from ragexp.report import summary, write_results

    from ragexp.validation import validate

    started = time.time()
    try:
        validate(cfg)  # every setting checked, every problem reported at once, before any work
        run_where_launched()
        tracker = build(cfg.tracker)
        sweep = sweep_info()
        tracker.use_store(sweep.get("tracking_uri"))
        result = run(cfg, run_name(cfg))
        if isinstance(result, Estimate):  # dry_run=true: nothing judged, nothing to log
            print(result.summary())
            return None
        output_dir = Path(HydraConfig.get().runtime.output_dir)
        results_file = write_results(result, output_dir)
        print(summary(result))
        # the logged config re-runs this job as it is: its name included
        config = {**OmegaConf.to_container(cfg, resolve=True), "run_name": result.name}  # type: ignore[dict-item]
        run_id = tracker.log_run(result, config, sweep.get("parent_run_id"), files=overrides_files(output_dir),
                                 started=started)
        print(f"results: {results_file}")
        print(f"tracked: {tracker.where()}" + (f", run {run_id}" if run_id else ""))
    except RagexpError as err:
        print(f"ragexp: error: {err}", file=sys.stderr)
        sys.exit(2)
    aggregates = result.aggregates
    retrieval_scored = aggregates["total_questions"] - aggregates.get("retrieval_excluded_questions", 0)
    if aggregates.get("failed_questions") == aggregates["total_questions"] and not retrieval_scored:
        print(f"ragexp: error: all {len(result.questions)} questions failed; see the reasons above", file=sys.stderr)
        sys.exit(1)
    if result.gate is not None and not result.gate.passed and not in_multirun():
        # in a sweep every job runs; the sweep exits with GATE_FAILED at its end (ragexp.callbacks)
        missed = [check.removesuffix(": FAILED") for check in result.gate.checks if check.endswith("FAILED")]
        print(f"ragexp: error: quality gate {result.gate.name!r} failed ({len(missed)} of {len(result.gate.checks)} "
              f"thresholds missed): {'; '.join(missed)}", file=sys.stderr)
        sys.exit(GATE_FAILED)
    return aggregates.get(cfg.get("objective", "overall_score"))


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


def overrides_files(output_dir: Path) -> tuple[Path, ...]:
    """Hydra's record of the job's command-line overrides, logged so the run can be repeated."""
    overrides = output_dir / ".hydra" / "overrides.yaml"
    return (overrides,) if overrides.exists() else ()
