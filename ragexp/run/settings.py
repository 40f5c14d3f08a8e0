"""The run's own settings: the top-level keys of conf/config.yaml, where their defaults are written
(once). `validate(cfg, RunSettings)` checks their types and ranges with every component's, before
any work; code reads them from the config, never with a default of its own."""
from __future__ import annotations

from typing import Any, Literal, Sequence

from ragexp.base.settings import Fraction, NonEmptyStr, NonNegativeFloat, PositiveInt

# the defaults written here: a config logged by a run from before the setting existed has no
# such key, and a logged config must still re-run (conf/config.yaml writes the same values)
EMBEDDING_MAP: Literal["auto"] = "auto"
MAX_GRID_POINTS = 5000


class RunSettings:
    """`run_name` (null: derived from the chosen options), `objective` (the aggregate the command
    returns, what a search maximises), `dry_run`, `verbose` (a sweep's jobs print all on the
    console), `slices` (per-question columns to aggregate by), `budget_usd` (null: no limit),
    `max_failed_share` (a larger share of failed questions fails the run), `embedding_map` (auto: a
    single run draws embedding_map.png, a sweep's jobs keep only its points; true: every run draws
    it; false: none), `max_grid_points` (a grid of the basic sweeper with more points is refused
    before any job: ragexp.sweep.folder). The other top-level keys are the groups and their components, checked on
    their own."""

    def __init__(self, run_name: str | None, objective: NonEmptyStr, dry_run: bool, verbose: bool,
                 slices: Sequence[str], budget_usd: NonNegativeFloat | None, max_failed_share: Fraction,
                 embedding_map: bool | Literal["auto"] = EMBEDDING_MAP, max_grid_points: PositiveInt = MAX_GRID_POINTS,
                 **groups: Any):
        self.run_name, self.objective, self.dry_run, self.verbose = run_name, objective, dry_run, verbose
        self.slices, self.budget_usd, self.max_failed_share = list(slices), budget_usd, max_failed_share
