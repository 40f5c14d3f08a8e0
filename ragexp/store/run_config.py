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
