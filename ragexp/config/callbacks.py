"""Hydra callbacks of the config layer: `RefuseSecrets` checks the composed config before Hydra
writes it to the run folder (`.hydra/config.yaml`), so that a credential given as a header in a
YAML file (`--config-dir`, `+experiment=`) is refused before it is written anywhere."""
from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ragexp.base.redact import credential_header
from ragexp.errors import BAD_INPUT


def credential_headers(cfg: DictConfig) -> list[str]:
    """One line per header of the config (any `headers` mapping outside `hydra`) that carries a
    credential, naming its full key."""
    found: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        if not isinstance(node, DictConfig):
            return
        for key in node:
            if prefix == "" and key == "hydra":
                continue
            value = node._get_node(key)
            path = f"{prefix}{key}"
            if key == "headers" and isinstance(value, DictConfig):
                for header in value:
                    raw = value._get_node(header)._value()  # unresolved: ${oc.env:...} is seen as such
                    why = credential_header(str(header), raw)
                    if why:
                        found.append(f"{prefix}{why}")
            elif isinstance(value, DictConfig):
                walk(value, path + ".")

    walk(cfg, "")
    return found


class RefuseSecrets(Callback):
    """Before a run or a sweep starts (and before Hydra saves its config): a credential in a header
    stops it with one line naming the key, exit status 2."""

    def check(self, config: DictConfig) -> None:
        """Exits with status 2 and one line per such header (Hydra turns an exception raised in a
        callback into a warning and goes on)."""
        problems = credential_headers(config)
        for why in problems:
            print(f"ragexp: error: {why} (nothing was written)", file=sys.stderr)
        if problems:
            sys.exit(BAD_INPUT)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.check(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.check(config)

