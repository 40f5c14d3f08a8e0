"""`python -m ragexp`: the Hydra entry point. Keep imports light: `--help` loads no model code."""
from pathlib import Path

import hydra
from omegaconf import DictConfig

CONF = str(Path(__file__).resolve().parent.parent / "conf")  # absolute: the same for `python -m` and `ragexp`


@hydra.main(version_base="1.3", config_path=CONF, config_name="config")
def main(cfg: DictConfig) -> float | None:
    from ragexp.app import execute

    return execute(cfg)


if __name__ == "__main__":
    main()
