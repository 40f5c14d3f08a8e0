"""Each grid point of a sweep composed once, not three times. Before a job runs, its config is
composed by ragexp's own check of every point (`folder.invalid_points`), again by Hydra's sweeper
(`validate_batch_is_legal`), and again by the launcher; at ~0.3 s a composition that is a minute
and a half before the first of 100 jobs. With the basic launcher (jobs in this process) the first
composition of a point is kept and handed out for the two that follow: copies to the checks, the
config itself to the launcher, which is its last use (the entry is then let go, so the memory held
is at most one config per point not yet launched)."""
from __future__ import annotations

import copy
from typing import Any

from omegaconf import DictConfig, OmegaConf

BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
USES = 3  # ragexp's check, Hydra's check, the launcher


class ComposedOnce:
    """Stands in for a config loader's `load_sweep_config` while a sweep is checked and launched."""

    def __init__(self, loader: Any):
        self.loader, self.compose = loader, loader.load_sweep_config
        self.kept: dict[tuple[str, ...], list] = {}  # overrides -> [config, uses left]

    def __call__(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        key = tuple(sweep_overrides)
        entry = self.kept.get(key)
        if entry is None:
            entry = self.kept[key] = [self.compose(master_config, list(sweep_overrides)), USES]
        entry[1] -= 1
        if entry[1] <= 0:  # the last use: the launcher's, which changes it
            del self.kept[key]
            handed = entry[0]
        else:
            handed = copy.deepcopy(entry[0])
        # as Hydra does: the asker's resolved values (the sweep folder's timestamp) hold in its point's config
        OmegaConf.copy_cache(from_config=master_config, to_config=handed)
        return handed

    def close(self) -> None:
        """The loader's own method back; nothing kept."""
        if self.loader.__dict__.get("load_sweep_config") is self:
            del self.loader.load_sweep_config
        self.kept.clear()


def compose_once(config: DictConfig) -> ComposedOnce | None:
    """Installs `ComposedOnce` on the global config loader for a sweep whose jobs run in this process
    (the basic launcher); None for a launcher that composes in other processes."""
    from hydra.core.global_hydra import GlobalHydra

    if config.hydra.launcher.get("_target_") != BASIC_LAUNCHER:
        return None
    loader: Any = GlobalHydra.instance().config_loader()
    installed = loader.__dict__.get("load_sweep_config")
    if not isinstance(installed, ComposedOnce):
        installed = loader.load_sweep_config = ComposedOnce(loader)
    return installed
