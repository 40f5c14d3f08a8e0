"""`python -m ragexp`: the Hydra entry point. Keep imports light: `--help` loads no model code."""
from pathlib import Path

import hydra
from omegaconf import DictConfig

# ragexp/conf: in a checkout (and an editable install) a symlink to the repository's top-level conf/, in a
# wheel the YAML files themselves (setuptools follows the link). Absolute, so `python -m ragexp` and the
# `ragexp` script find the same folder; user folders come on top with --config-dir or hydra.searchpath.
CONF = str(Path(__file__).resolve().parent / "conf")


@hydra.main(version_base="1.3", config_path=CONF, config_name="config")
def main(cfg: DictConfig) -> float | None:
    from ragexp.app import execute

    return execute(cfg)


if __name__ == "__main__":
    main()
