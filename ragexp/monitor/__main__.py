"""`python -m ragexp.monitor`: production logs summarised per time window, a sample judged,
logged to MLflow, checked against a baseline. Config: conf/monitor.yaml (README, "Monitoring
production traffic"). Exit status: 0 fine, 2 bad input, 3 an alert fired."""
import sys

import hydra
from omegaconf import DictConfig

from ragexp.__main__ import CONF


@hydra.main(version_base="1.3", config_path=CONF, config_name="monitor")
def main(cfg: DictConfig) -> None:
    from ragexp.monitor.app import execute

    status = execute(cfg)
    if status:
        sys.exit(status)


if __name__ == "__main__":
    main()
