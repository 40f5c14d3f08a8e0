"""What a multirun's callback and the racing sweeper share: the keys a sweep varies, and its grid as
Hydra's basic sweeper enumerates it, each point validated before any job runs (and the model files
its jobs would serve, `wanted_by`). (The files a sweep and its jobs share, sweep.json and
failure.json, are ragexp.store.run_folder's.)"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
FIRST_PROGRESS_S, PROGRESS_EVERY_S = 1.0, 10.0  # lines on the checking of a grid's points: the first, then each


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

    return [point for batch in BasicSweeper.split_arguments(grid_arguments(config), None) for point in batch]


def grid_arguments(config: DictConfig) -> list:
    """The parsed overrides of the grid (hydra.sweeper.params, then the command line)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    arguments = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    arguments += given_overrides(config)
    return OverridesParser.create(config_loader=GlobalHydra.instance().config_loader()).parse_overrides(arguments)


def grid_size(config: DictConfig) -> tuple[int, dict[str, int]]:
    """The number of points of the grid and the number of values of each swept key, counted without
    making the points (Hydra's basic sweeper: a key swept twice takes its last values)."""
    counts: dict[str, int] = {}
    for override in grid_arguments(config):
        if override.is_sweep_override() and override.is_discrete_sweep():
            counts[override.get_key_element()] = sum(1 for _ in override.sweep_string_iterator())
    size = 1
    for count in counts.values():
        size *= count
    return size, counts


def refuse_oversized(config: DictConfig, size: int, counts: dict[str, int]) -> None:
    """Exit status 2, before any job and any store, for a grid of the basic sweeper larger than
    `max_grid_points`: one line with its size, and how to race it or raise the cap."""
    from ragexp.errors import BAD_INPUT
    from ragexp.run.settings import MAX_GRID_POINTS

    cap = int(OmegaConf.select(config, "max_grid_points", default=MAX_GRID_POINTS))
    if config.hydra.sweeper.get("_target_") == BASIC_SWEEPER and size > cap:
        shape = " x ".join(f"{n} {key}" for key, n in counts.items())
        print(f"ragexp: error: the grid has {size:,} points ({shape}), more than max_grid_points={cap:,}; no job was "
              "started: race it (hydra/sweeper=racing: every point on a few questions, the best on more; "
              f"docs/how-to/racing.md), sweep fewer values, or raise the cap (max_grid_points={size})", file=sys.stderr)
        sys.exit(BAD_INPUT)


def invalid_points(config: DictConfig, each: Callable[[DictConfig], Any] | None = None) -> list[str]:
    """Each grid point composed and validated (ragexp.validation): one entry per invalid point,
    naming its job number, its swept values and every problem; `each` is given every valid point's
    composed config. First the grid's size is printed (a grid of the basic sweeper over
    `max_grid_points` is refused there), then a line on the checking after FIRST_PROGRESS_S seconds
    and every PROGRESS_EVERY_S after that, with the time left: a large grid takes minutes before its
    first job."""
    from hydra.core.global_hydra import GlobalHydra

    from ragexp.config.validation import problems
    from ragexp.run.settings import RunSettings

    size, counts = grid_size(config)
    refuse_oversized(config, size, counts)
    print(f"ragexp: a grid of {size:,} points; checking each before job 0", file=sys.stderr, flush=True)
    loader, swept = GlobalHydra.instance().config_loader(), swept_keys(config)
    invalid = []
    started = said = time.monotonic()
    wait = FIRST_PROGRESS_S
    for number, point in enumerate(grid_points(config)):
        try:
            composed = loader.load_sweep_config(config, list(point))
            errors = problems(composed, RunSettings)
        except Exception as err:  # noqa: BLE001 - Hydra cannot compose it (an unknown option or key)
            errors = [" ".join(str(err).splitlines()[:2])]
        if not errors and each is not None:
            each(composed)
        if errors:
            name = " ".join(o for o in point if o.split("=")[0].lstrip("+~") in swept) or " ".join(point)
            invalid.append(f"job {number} ({name}):\n    " + "\n    ".join(errors))
        now = time.monotonic()
        if now - said >= wait:
            said, wait, done = now, PROGRESS_EVERY_S, number + 1
            left = (now - started) / done * (size - done)
            print(f"ragexp: checked {done:,} of {size:,} grid points in {now - started:.0f} s, about {left:.0f} s left",
                  file=sys.stderr, flush=True)
    if said != started:
        print(f"ragexp: checked the {size:,} grid points in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return invalid


def wanted_by(config) -> dict[str, tuple[dict, str]]:
    """The servers a job's composed config would start: {key: (settings, setting)}, one per endpoint
    that names a model file ragexp serves (`setting`: where, e.g. `judge.endpoint`). An endpoint
    that cannot be read here, or whose file is not found, names none (the job says why when it runs)."""
    from ragexp.llm.endpoint import model_file
    from ragexp.llm.served import server_settings, settings_key

    wanted: dict[str, tuple[dict, str]] = {}
    tree = OmegaConf.to_container(config, resolve=False)  # (some values resolve only inside the job)
    for where in endpoints_in({k: v for k, v in tree.items() if k != "hydra"}, ""):  # type: ignore[union-attr]
        try:
            node = OmegaConf.to_container(OmegaConf.select(config, where), resolve=True)
        except Exception:  # noqa: BLE001 - a value only the job can resolve: it starts its own server
            continue
        if node.get("model_path") is None:  # type: ignore[union-attr]
            continue
        found = model_file(str(node["model_path"]))  # type: ignore[index]
        if not isinstance(found, str):
            settings = server_settings(found, *(node[k] for k in ("threads", "context_size", "parallel", "gpu_layers")))  # type: ignore[index]
            wanted.setdefault(settings_key(settings), (settings, where))
    return wanted


def endpoints_in(node, where: str):
    """The dotted paths of a config tree's local endpoints."""
    if isinstance(node, dict):
        if str(node.get("_target_", "")).endswith(".LocalEndpoint"):
            yield where
        for name, value in node.items():
            yield from endpoints_in(value, f"{where}.{name}" if where else str(name))
