"""A run's config as its tracker writes it: flat params and config.yaml, masked (ragexp.base.redact:
values from the environment as `${oc.env:NAME}`, URL query strings and credential-named keys `***`)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ragexp.base.redact import masked

CONFIG = "config.yaml"


def flatten(config: dict, prefix: str = "") -> dict[str, str]:
    """Nested config -> {"a.b.c": "value"}, masked (ragexp.base.redact.masked)."""
    flat = {}

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                flat[f"{prefix}{key}"] = json.dumps(value) if isinstance(value, list) else str(value)

    walk(masked(config), prefix)
    return flat


def write_config(folder: Path, config: dict[str, Any]) -> Path:
    """The job config in the run folder, masked (ragexp.base.redact: give it `written_config(cfg)`,
    which keeps `${oc.env:NAME}` unresolved): what the run's params and its config.yaml artifact are made of."""
    from ragexp.base.yaml_text import dump_yaml

    path = Path(folder) / CONFIG
    path.write_text(dump_yaml(masked(config)))
    return path


def options(folder: Path) -> dict[str, str]:
    """The option chosen in each config group of a run (`chunker: recursive`, `scoring_embedder: minilm`
    for `embedder@scoring_embedder`), as the job recorded them in run.json (`options`: Hydra's runtime
    choices, whichever door composed the config), else as Hydra recorded them (.hydra/hydra.yaml, a
    folder written before run.json held them), masked: short params beside the `_target_`s, which
    MLflow's runs table shows whole. Hydra's own groups and nested ones are left out."""
    meta = Path(folder) / "run.json"
    choices = json.loads(meta.read_text()).get("options") if meta.is_file() else None
    path = Path(folder) / ".hydra" / "hydra.yaml"
    if choices is None and path.is_file():
        from ragexp.base.yaml_text import read_yaml

        choices = ((read_yaml(path.read_text()) or {}).get("hydra") or {}).get("runtime", {}).get("choices")
    chosen = {str(group).partition("@")[2] or str(group): str(option) for group, option in (choices or {}).items()
              if option is not None and "/" not in str(group)}
    return masked(chosen)
