"""Hydra callbacks of the config layer: `RefuseSecrets` checks the composed config before Hydra
writes it to the run folder (`.hydra/config.yaml`), so that a secret written in a YAML file
(`--config-dir`, `+experiment=`) is refused before it is copied anywhere, by the rule the command
line is checked with (ragexp.config.secrets)."""
from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ragexp.config.secrets import secret_in_setting
from ragexp.errors import BAD_INPUT


def secrets_in_config(cfg: DictConfig) -> list[str]:
    """One line per setting of the config (outside `hydra`) that would write a secret (a credential
    in a header, a literal value under a credential-named key, a URL with credentials or a query
    string: `secret_in_setting`), naming its full key. Values are read unresolved: `${oc.env:...}`
    is seen as such."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    found: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if not (prefix == "" and key == "hydra"):
                    walk(value, f"{prefix}{key}.")
            return
        why = secret_in_setting(prefix.rstrip("."), node)
        if why:
            found.append(why)

    walk(raw, "")
    return found


class RefuseSecrets(Callback):
    """Before a run or a sweep starts (and before Hydra saves its config): a secret in the config
    stops it with one line naming the key, exit status 2."""

    def check(self, config: DictConfig) -> None:
        """Exits with status 2 and one line per such setting (Hydra turns an exception raised in a
        callback into a warning and goes on)."""
        problems = secrets_in_config(config)
        for why in problems:
            print(f"ragexp: error: {why} (nothing was written)", file=sys.stderr)
        if problems:
            sys.exit(BAD_INPUT)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.check(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.check(config)

