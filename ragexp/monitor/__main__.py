"""`python -m ragexp.monitor`: production logs summarised per time window, a sample judged,
logged to MLflow, checked against a baseline. Config: conf/monitor.yaml (docs/how-to/monitor.md).
Exit status: 0 fine, 2 bad input, 3 an alert fired."""
import sys

from ragexp.config import CONF
from ragexp.config.hydra_app import guarded


def hydra_main() -> None:
    """The Hydra app of conf/monitor.yaml; `--help` (from conf/) does not import Hydra."""
    import hydra
    from omegaconf import DictConfig

    @hydra.main(version_base="1.3", config_path=str(CONF), config_name="monitor")
    def monitor(cfg: DictConfig) -> None:
        from ragexp.monitor.app import execute

        status = execute(cfg)
        if status:
            sys.exit(status)

    monitor()


def main() -> None:
    guarded(hydra_main, "monitor")  # as `python -m ragexp`: secrets on the command line refused, config errors exit 2


if __name__ == "__main__":
    main()
