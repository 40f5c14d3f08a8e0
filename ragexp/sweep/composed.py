"""Each grid point of a sweep composed once, and cheaply. Before a job runs, its config is composed
by ragexp's own check of every point (`folder.invalid_points`), again by Hydra's sweeper
(`validate_batch_is_legal`), and again by the launcher. A composition reads the config files
again and builds the defaults list again (~0.2 s), although most points of a grid differ from
another only in values (`retriever.top_k=2,3,4,5`), not in the options they choose (`chunker=`):
- the points that choose the same options share one defaults list and the config composed from
  it; each point gets a copy with its own values set, by Hydra's own code after that step
  (`SharedDefaults`);
- with the basic launcher (jobs in this process), the first composition of a point is kept and
  handed out for the two that follow, then to the launcher, which is its last use (the entry is
  then let go).
With another launcher, jobs compose in their own processes, and only the parent's checks share."""
from __future__ import annotations

import copy
import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf

BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
USES = 3  # ragexp's check, Hydra's check, the launcher


class SharedDefaults:
    """While installed, Hydra's composition builds the defaults list and composes from it once per
    set of chosen options: the defaults list depends only on the group overrides (and on the
    search path, which `hydra.*` overrides may change), and the values a point sets are applied by
    Hydra afterwards, to a copy of the shared config. A composition with other sources (Hydra's
    compose API inside a job) has another key."""

    def __init__(self):
        from hydra._internal import config_loader_impl

        installed = getattr(config_loader_impl.create_defaults_list, "__self__", None)
        if isinstance(installed, SharedDefaults):  # left by a sweep that never ended (in a process that goes on)
            installed.close()
        self.module, self.loader_class = config_loader_impl, config_loader_impl.ConfigLoaderImpl
        self.real_list = config_loader_impl.create_defaults_list
        self.real_compose = self.loader_class._compose_config_from_defaults_list
        self.lists: dict[tuple, Any] = {}  # key -> Hydra's DefaultsList of the first point with those options
        self.configs: dict[int, DictConfig | None] = {}  # id(DefaultsList.defaults) -> the config composed from it
        shared = self

        def compose_from(loader, defaults, repo):
            if id(defaults) not in shared.configs:  # not a shared defaults list
                return shared.real_compose(loader, defaults, repo)
            kept = shared.configs[id(defaults)]
            if kept is None:
                kept = shared.configs[id(defaults)] = shared.real_compose(loader, defaults, repo)
            return copy.deepcopy(kept)

        self.module.create_defaults_list = self.defaults_list
        self.loader_class._compose_config_from_defaults_list = compose_from

    def defaults_list(self, repo, config_name, overrides_list, prepend_hydra, skip_missing):
        """Hydra's `create_defaults_list`, shared by the points that choose the same options."""
        chosen, values = [], []
        for override in overrides_list:
            if override.is_sweep_override():
                continue
            group = not isinstance(override.value(), dict) and repo.group_exists(override.key_or_group)
            (values if not group else chosen).append(override)
            if not group and override.key_or_group.startswith("hydra"):
                chosen.append(override)  # hydra.searchpath and the like: part of the key too
        sources = tuple((source.provider, source.path) for source in repo.get_sources())
        key = (config_name, prepend_hydra, skip_missing, sources, tuple(o.input_line for o in chosen))
        found = self.lists.get(key)
        if found is None:
            found = self.real_list(repo=repo, config_name=config_name, overrides_list=overrides_list,
                                   prepend_hydra=prepend_hydra, skip_missing=skip_missing)
            if [o.input_line for o in found.config_overrides] != [o.input_line for o in values]:
                return found  # Hydra told values from options otherwise: this point is composed as usual
            self.lists[key] = found
            self.configs[id(found.defaults)] = None  # composed when Hydra first asks
        return dataclasses.replace(found, config_overrides=values)

    def close(self) -> None:
        """Hydra's own functions back; nothing kept."""
        if self.module.create_defaults_list == self.defaults_list:
            self.module.create_defaults_list = self.real_list
            self.loader_class._compose_config_from_defaults_list = self.real_compose
        self.lists.clear()
        self.configs.clear()


class ComposedOnce:
    """Stands in for a config loader's `load_sweep_config` while a sweep is checked and launched
    (`keep`: the jobs run in this process); shares the defaults of points that choose the same
    options in any case."""

    def __init__(self, loader: Any, keep: bool = True):
        self.loader, self.compose = loader, loader.load_sweep_config
        self.kept: dict[tuple[str, ...], list] = {}  # overrides -> [config, uses left]
        self.shared = SharedDefaults()
        if keep:
            loader.load_sweep_config = self

    def __call__(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        key = tuple(sweep_overrides)
        entry = self.kept.get(key)
        if entry is None:
            entry = self.kept[key] = [self.compose(master_config, list(sweep_overrides)), USES]
        entry[1] -= 1
        if entry[1] <= 0:  # the last use: the launcher's, which changes it
            del self.kept[key]
            handed = entry[0]
        elif entry[1] == 1:  # Hydra's check: it composes and lets go, changing nothing
            handed = entry[0]
        else:  # ragexp's check, which resolves prompts:/... in place: a copy
            handed = copy.deepcopy(entry[0])
        # as Hydra does: the asker's resolved values (the sweep folder's timestamp) hold in its point's config
        OmegaConf.copy_cache(from_config=master_config, to_config=handed)
        return handed

    def close(self) -> None:
        """The loader's own method back; nothing kept."""
        if self.loader.__dict__.get("load_sweep_config") is self:
            del self.loader.load_sweep_config
        self.kept.clear()
        self.shared.close()


def compose_once(config: DictConfig) -> ComposedOnce:
    """`ComposedOnce` installed on the global config loader: its kept points for a sweep whose jobs
    run in this process (the basic launcher), the shared defaults for any. The sweep that installs
    it closes it (ragexp.sweep.callbacks.SweepTracking.close)."""
    from hydra.core.global_hydra import GlobalHydra

    loader: Any = GlobalHydra.instance().config_loader()
    return ComposedOnce(loader, keep=config.hydra.launcher.get("_target_") == BASIC_LAUNCHER)
