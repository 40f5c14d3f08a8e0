"""Running one of ragexp's Hydra apps (`python -m ragexp`, `.synth`, `.monitor`): `--help` from
conf/, secrets refused before Hydra writes the command line, config mistakes as bad input.
Imports stay light: Hydra is imported only to run."""
import sys

from ragexp.config.docs import print_help_if_asked
from ragexp.config.secrets import refuse_secret_overrides
from ragexp.errors import BAD_INPUT, RagexpError


def config_error(err: BaseException | None) -> bool:
    """Hydra's own config mistakes (an unknown option or key, a bad override) and ragexp's: bad input."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(err, (HydraException, OmegaConfBaseException, RagexpError))


def guarded(app, config: str = "config") -> None:
    """Runs a Hydra app (`python -m ragexp`, `.synth`, `.monitor`; `config`: its file in conf/):
    `--help` is ragexp's own, written from conf/ (ragexp.config.docs) without composing a config;
    refuses a command line that carries a secret before Hydra writes it to `.hydra/`; Hydra reports
    its config errors with exit status 1, which becomes 2 (bad input) as for ragexp's own."""
    if print_help_if_asked(config, sys.argv[1:]):
        return
    refuse_secret_overrides(sys.argv[1:])
    try:
        app()
    except SystemExit as done:
        # Hydra's run_and_report prints the error, then sys.exit(1) while handling it (__context__)
        if done.code == 1 and config_error(done.__context__):
            sys.exit(BAD_INPUT)
        raise
