"""What a multirun's callback and the racing sweeper share: the keys a sweep varies, and its grid as
Hydra's basic sweeper enumerates it, each point validated before any job runs. (The files a sweep
and its jobs share, sweep.json and failure.json, are ragexp.store.run_folder's.)"""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf


def given_overrides(config: DictConfig) -> list[str]:
    """The command line's overrides as given: `${oc.env:NAME}` not resolved (iterating the config's
    list would resolve it, writing the variable's value where the override is parsed or named)."""
    return [str(o) for o in OmegaConf.to_container(config.hydra.overrides.task, resolve=False)]  # type: ignore[union-attr]


def swept_keys(config: DictConfig) -> list[str]:
    """The keys a multirun varies: sweep overrides on the command line and hydra.sweeper.params."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(given_overrides(config))
    keys = [o.get_key_element() for o in parsed if o.is_sweep_override()]
    keys += [str(k) for k in (config.hydra.sweeper.get("params") or {})]
    return list(dict.fromkeys(keys))


def grid_points(config: DictConfig) -> list[list[str]]:
    """Every job's overrides, as Hydra's basic sweeper will enumerate them (hydra.sweeper.params,
    then the command line)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    arguments = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    arguments += given_overrides(config)
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    return [point for batch in BasicSweeper.split_arguments(parser.parse_overrides(arguments), None) for point in batch]


def invalid_points(config: DictConfig) -> list[str]:
    """Each grid point composed and validated (ragexp.validation): one entry per invalid point,
    naming its job number, its swept values and every problem."""
    from hydra.core.global_hydra import GlobalHydra

    from ragexp.config.validation import problems
    from ragexp.run.settings import RunSettings

    loader, swept = GlobalHydra.instance().config_loader(), swept_keys(config)
    invalid = []
    for number, point in enumerate(grid_points(config)):
        try:
            errors = problems(loader.load_sweep_config(config, list(point)), RunSettings)
        except Exception as err:  # noqa: BLE001 - Hydra cannot compose it (an unknown option or key)
            errors = [" ".join(str(err).splitlines()[:2])]
        if errors:
            name = " ".join(o for o in point if o.split("=")[0].lstrip("+~") in swept) or " ".join(point)
            invalid.append(f"job {number} ({name}):\n    " + "\n    ".join(errors))
    return invalid
