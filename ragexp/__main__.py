"""`python -m ragexp`: the Hydra entry point. Keep imports light: `--help` loads no model code."""
import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from ragexp.app import execute

    return execute(cfg)


if __name__ == "__main__":
    main()
