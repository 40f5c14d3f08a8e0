"""Hydra callbacks of the config layer: `RefuseSecrets` checks the composed config before Hydra
writes it to the run folder (`.hydra/config.yaml`), so that a secret written in a YAML file
(`--config-dir`, `+experiment=`) is refused before it is copied anywhere, by the rule the command
line is checked with (ragexp.config.secrets); `WritableFolder` makes sure the run folder (a
sweep's folder) can be written before Hydra writes its config and log there. Every hook of
ragexp's callbacks (these and ragexp.sweep.callbacks) runs under `not_a_warning`: Hydra turns an
exception raised in a callback into a UserWarning and goes on, and the command would exit 0."""
from __future__ import annotations

import os
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ragexp.base.redact import scrub_url
from ragexp.config.secrets import secret_in_setting
from ragexp.errors import BAD_INPUT, RUN_FAILED, RagexpError, StoreUnreachable


@contextmanager
def not_a_warning() -> Iterator[None]:
    """An exception of a callback's hook ends the command with its exit status (Hydra would turn it
    into a warning, and the run or sweep would go on and exit 0): a store that does not answer 4
    with one line, a setting 2 with one line, anything else a bug, with its traceback, 1. A `with`
    block or a decorator (`@not_a_warning()`)."""
    try:
        yield
    except StoreUnreachable as err:
        print(f"ragexp: error: {scrub_url(str(err))}", file=sys.stderr)
        sys.exit(RUN_FAILED)
    except RagexpError as err:
        print(f"ragexp: error: {scrub_url(str(err))}", file=sys.stderr)
        sys.exit(BAD_INPUT)
    except Exception:  # noqa: BLE001 - a bug: shown whole, and the command fails
        traceback.print_exc()
        sys.exit(1)


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
        """Exits with status 2 and one line per such setting."""
        problems = secrets_in_config(config)
        for why in problems:
            print(f"ragexp: error: {why} (nothing was written)", file=sys.stderr)
        if problems:
            sys.exit(BAD_INPUT)

    @not_a_warning()
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.check(config)

    @not_a_warning()
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.check(config)


class WritableFolder(Callback):
    """Before a run or a sweep starts, before Hydra makes its folder and writes its config and its
    log there (where a failure is a traceback): a folder that cannot be made or written stops the
    command with one line naming it, exit status 2."""

    @not_a_warning()
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.check("hydra.run.dir", config.hydra.run.dir)

    @not_a_warning()
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.check("hydra.sweep.dir", config.hydra.sweep.dir)

    def check(self, setting: str, folder: str) -> None:
        problem = unwritable(Path(folder))
        if problem:
            print(f"ragexp: error: {setting}: cannot write the run folder {folder} ({problem}); give a folder that "
                  f"can be written ({setting}=...)", file=sys.stderr)
            sys.exit(BAD_INPUT)


def unwritable(folder: Path) -> str | None:
    """Why `folder` cannot be made or written (a file in its path, no permission, a full disk or
    file size limit), or None: a byte written and removed again in the folder, or in its nearest
    parent that exists, where the folder would be made. It makes no folder: runs started together
    share the parents (outputs/DATE), and one removing a parent it had made to find out raced
    another's making of its folder there; a sweep refused later (a bad grid point) leaves nothing."""
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        return f"Not a directory: {existing}"
    probe = existing / f".ragexp-probe-{os.getpid()}"
    try:
        with probe.open("wb") as out:
            out.write(b"\n")
    except OSError as err:
        return f"{err.strerror or type(err).__name__}" + (f": {err.filename}" if err.filename else "")
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass
    return None
