"""`python -m ragexp.synth`: a synthetic test set from a corpus (conf/synth.yaml). Light imports:
`--help` (from conf/, ragexp.config.docs) imports neither Hydra nor model code."""
from ragexp.config import CONF
from ragexp.config.hydra_app import guarded


def hydra_main() -> None:
    import hydra
    from omegaconf import DictConfig

    @hydra.main(version_base="1.3", config_path=str(CONF), config_name="synth")
    def synthesise(cfg: DictConfig) -> None:
        from ragexp.synth.app import execute

        execute(cfg)

    synthesise()


def main() -> None:
    guarded(hydra_main, "synth")  # as `python -m ragexp`: secrets on the command line refused, config errors exit 2


if __name__ == "__main__":
    main()
