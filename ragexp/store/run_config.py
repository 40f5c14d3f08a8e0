"""A run's config as its tracker writes it: flat params and config.yaml, secret-looking keys left out
and URL credentials masked."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ragexp.base.redact import scrub_url

SECRET = re.compile(r"(^|_)(api_key|secret|password|token)$", re.IGNORECASE)
CONFIG = "config.yaml"


def flatten(config: dict, prefix: str = "") -> dict[str, str]:
    """Nested config -> {"a.b.c": "value"}, with secret-looking keys left out."""
    flat = {}
    for key, value in config.items():
        if SECRET.search(str(key)):
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = scrub_url(json.dumps(value) if isinstance(value, list) else str(value))
    return flat


def write_config(folder: Path, config: dict[str, Any]) -> Path:
    """The resolved job config in the run folder (secret-looking keys left out, URL credentials
    masked): what the run's params and its config.yaml artifact are made of."""
    from ragexp.base.yaml_text import dump_yaml

    path = Path(folder) / CONFIG
    path.write_text(dump_yaml(scrub(config)))
    return path


def scrub(config: Any) -> Any:
    """The config without secret-looking keys, for artifacts."""
    if isinstance(config, dict):
        return {k: scrub(v) for k, v in config.items() if not SECRET.search(str(k))}
    if isinstance(config, list):
        return [scrub(v) for v in config]
    return scrub_url(config)
