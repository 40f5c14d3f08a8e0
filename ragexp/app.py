"""The job behind `python -m ragexp`: run the pipeline, write results, log to the tracker."""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ragexp.errors import RagexpError

log = logging.getLogger("ragexp")
PARENT_RUN_FILE = ".ragexp_parent_run_id"



def run_name(cfg: DictConfig) -> str:
    """`run_name` if set; in a sweep, the job's overrides (e.g. chunker=semantic,retriever=bm25);
    otherwise the chosen components joined (e.g. sample-recursive-minilm-dense)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if cfg.get("run_name"):
        return str(cfg.run_name)
    hydra = HydraConfig.get()
    if hydra.mode == RunMode.MULTIRUN and hydra.job.override_dirname:
        return hydra.job.override_dirname
    choices = hydra.runtime.choices
    return "-".join(str(choices.get(g)) for g in ("dataset", "chunker", "embedder", "retriever", "generator"))


def parent_run_id() -> str | None:
    """The sweep's parent run, written by `ragexp.callbacks.SweepTracking` (multirun only)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra = HydraConfig.get()
    if hydra.mode != RunMode.MULTIRUN:
        return None
    marker = Path(hydra.sweep.dir) / PARENT_RUN_FILE
    return marker.read_text().strip() if marker.exists() else None


def execute(cfg: DictConfig) -> float | None:
    """Runs one job; returns the configured objective (for sweepers that optimise it)."""
    from hydra.core.hydra_config import HydraConfig

    from ragexp.pipeline import build, run
    from ragexp.report import summary, write_results

    try:
        tracker = build(cfg.tracker)
        result = run(cfg, run_name(cfg))
        output_dir = Path(HydraConfig.get().runtime.output_dir)
        results_file = write_results(result, output_dir)
        print(summary(result))
        config = OmegaConf.to_container(cfg, resolve=True)
        run_id = tracker.log_run(result, config, parent_run_id(), files=overrides_files(output_dir))
        print(f"results: {results_file}")
        print(f"tracked: {tracker.where()}" + (f", run {run_id}" if run_id else ""))
    except RagexpError as err:
        print(f"ragexp: error: {err}", file=sys.stderr)
        sys.exit(2)
    if result.aggregates.get("failed_questions") == result.aggregates["total_questions"]:
        print(f"ragexp: error: all {len(result.questions)} questions failed; see the reasons above", file=sys.stderr)
        sys.exit(1)
    return result.aggregates.get(cfg.get("objective", "overall_score"))


def overrides_files(output_dir: Path) -> tuple[Path, ...]:
    """Hydra's record of the job's command-line overrides, logged so the run can be repeated."""
    overrides = output_dir / ".hydra" / "overrides.yaml"
    return (overrides,) if overrides.exists() else ()
