"""`python -m ragexp.monitor`: production logs summarised per time window, a sample judged,
logged to MLflow, checked against a baseline. Config: conf/monitor.yaml (README, "Monitoring
production traffic"). Exit status: 0 fine, 2 bad input, 3 an alert fired."""
import sys

import hydra
from omegaconf import DictConfig

from ragexp.__main__ import CONF, config_error


@hydra.main(version_base="1.3", config_path=CONF, config_name="monitor")
def hydra_main(cfg: DictConfig) -> None:
    from ragexp.monitor.app import execute

    status = execute(cfg)
    if status:
        sys.exit(status)


def main() -> None:
    """As `python -m ragexp`: a secret on the command line is refused before Hydra writes it to
    `.hydra/`, and Hydra's config errors (exit status 1) become bad input (2)."""
    from ragexp.errors import BAD_INPUT
    from ragexp.secrets import refuse_secret_overrides

    refuse_secret_overrides(sys.argv[1:])
    try:
        hydra_main()
    except SystemExit as done:
        if done.code == 1 and config_error(done.__context__):
            sys.exit(BAD_INPUT)
        raise


if __name__ == "__main__":
    main()
