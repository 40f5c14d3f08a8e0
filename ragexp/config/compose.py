"""The config as `python -m ragexp` composes it, for every door that is not the command line itself
(`ragexp.evaluate`, calibrate, the tests): the packaged conf/ (with a user's folder searched first)
and the overrides, spelled as the command line spells them (`system.params.NAME=value`)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ragexp.config import CONF
from ragexp.config.overrides import with_user_params
from ragexp.errors import RagexpError


def compose(overrides: Sequence[str] = (), config_dir: str | Path | None = None, config_name: str = "config"):
    """The job config (without Hydra's own node) and the chosen option of each group (Hydra's
    runtime choices), composed with Hydra's compose API. Hydra's global state is left as it was
    (it may be inside a Hydra app, or a test that composed). A bad option or key raises one
    RagexpError, with the options of the group when the option is unknown, as the command line
    lists them."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.initialize import get_gh_backup, restore_gh_from_backup
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    search = [f"hydra.searchpath=[file://{Path(config_dir).resolve()}]"] if config_dir else []
    outer = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = hydra_compose(config_name=config_name, overrides=[*search, *with_user_params(list(overrides))],
                                return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as err:
        raise RagexpError(one_line(err)) from None
    finally:
        restore_gh_from_backup(outer)
    choices = dict(cfg.hydra.runtime.choices)
    return OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), choices


def one_line(err: Exception) -> str:
    """Hydra's error in one line; for an unknown option, with the group's options (Hydra lists them
    on the lines after "Available options in 'GROUP':"; "Could not find 'judge/nosuchjudge'" alone
    does not say what would work)."""
    lines = str(err).splitlines()
    first = next((line.strip() for line in lines if line.strip()), type(err).__name__)
    start = next((i for i, line in enumerate(lines) if line.startswith("Available options")), None)
    if start is None:
        return first
    listed = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        listed.append(line.strip())
    return f"{first}; the options: {', '.join(listed)}" if listed else first
