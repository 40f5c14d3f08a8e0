"""`python -m ragexp.synth`: a synthetic test set from a corpus (conf/synth.yaml). Light imports:
`--help` loads no model code."""
import hydra
from omegaconf import DictConfig

from ragexp.__main__ import CONF, guarded


@hydra.main(version_base="1.3", config_path=CONF, config_name="synth")
def hydra_main(cfg: DictConfig) -> None:
    from ragexp.synth.app import execute

    execute(cfg)


def main() -> None:
    guarded(hydra_main)  # as `python -m ragexp`: secrets on the command line refused, config errors exit 2


if __name__ == "__main__":
    main()
