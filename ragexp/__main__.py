"""`python -m ragexp`: the Hydra entry point. Keep imports light: `--help` loads no model code."""
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

# ragexp/conf: in a checkout (and an editable install) a symlink to the repository's top-level conf/, in a
# wheel the YAML files themselves (setuptools follows the link). Absolute, so `python -m ragexp` and the
# `ragexp` script find the same folder; user folders come on top with --config-dir or hydra.searchpath.
CONF = str(Path(__file__).resolve().parent / "conf")


@hydra.main(version_base="1.3", config_path=CONF, config_name="config")
def hydra_main(cfg: DictConfig) -> float | None:
    from ragexp.run.app import execute

    return execute(cfg)


def config_error(err: BaseException | None) -> bool:
    """Hydra's own config mistakes (an unknown option or key, a bad override) and ragexp's: bad input."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ragexp.errors import RagexpError

    return isinstance(err, (HydraException, OmegaConfBaseException, RagexpError))


def guarded(app) -> None:
    """Runs a Hydra app (`python -m ragexp`, `.synth`, `.monitor`): refuses a command line that
    carries a secret before Hydra writes it to `.hydra/`; Hydra reports its config errors with exit
    status 1, which becomes 2 (bad input) as for ragexp's own."""
    from ragexp.errors import BAD_INPUT
    from ragexp.secrets import refuse_secret_overrides

    refuse_secret_overrides(sys.argv[1:])
    try:
        app()
    except SystemExit as done:
        # Hydra's run_and_report prints the error, then sys.exit(1) while handling it (__context__)
        if done.code == 1 and config_error(done.__context__):
            sys.exit(BAD_INPUT)
        raise


def main() -> None:
    guarded(hydra_main)


if __name__ == "__main__":
    main()
