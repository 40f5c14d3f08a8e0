"""`python -m ragexp.monitor`: production logs summarised per time window, a sample judged,
logged to MLflow, checked against a baseline. Config: conf/monitor.yaml (README, "Monitoring
production traffic"). Exit status: 0 fine, 2 bad input, 3 an alert fired."""
import sys

import hydra
from omegaconf import DictConfig

from ragexp.__main__ import CONF, guarded


@hydra.main(version_base="1.3", config_path=CONF, config_name="monitor")
def hydra_main(cfg: DictConfig) -> None:
    from ragexp.monitor.app import execute

    status = execute(cfg)
    if status:
        sys.exit(status)


def main() -> None:
    guarded(hydra_main)  # as `python -m ragexp`: secrets on the command line refused, config errors exit 2


if __name__ == "__main__":
    main()
