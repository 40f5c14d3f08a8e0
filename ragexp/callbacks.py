"""Hydra callback: a multirun gets one parent run in the tracker, its jobs nest under it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepTracking(Callback):
    """`on_multirun_start` opens the parent run and leaves its id in the sweep folder, where
    each job (in this process or another) finds it; `on_multirun_end` attaches the jobs'
    results.json files, merged, to the parent run and closes it."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from ragexp.app import PARENT_RUN_FILE
        from ragexp.pipeline import build

        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        self.tracker = build(config.tracker)
        overrides = " ".join(config.hydra.overrides.task)
        self.parent_id = self.tracker.start_sweep(
            name=f"sweep {sweep_dir.parent.name}/{sweep_dir.name}",
            tags={"sweep_dir": str(sweep_dir.resolve()), "sweep_overrides": overrides},
        )
        if self.parent_id:
            (sweep_dir / PARENT_RUN_FILE).write_text(self.parent_id)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        merged: dict = {}
        for results in sorted(sweep_dir.glob("*/results.json")):
            merged.update(json.loads(results.read_text()))
        if merged:
            (sweep_dir / "results.json").write_text(json.dumps(merged, indent=2) + "\n")
        if getattr(self, "parent_id", None):
            self.tracker.end_sweep(self.parent_id, merged)
