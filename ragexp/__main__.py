"""`python -m ragexp`: the Hydra entry point. Keep imports light: `--help` (written from conf/ by
ragexp.config.docs) imports neither Hydra nor any model code."""
import sys
from pathlib import Path

# ragexp/conf: in a checkout (and an editable install) a symlink to the repository's top-level conf/, in a
# wheel the YAML files themselves (setuptools follows the link). Absolute, so `python -m ragexp` and the
# `ragexp` script find the same folder; user folders come on top with --config-dir or hydra.searchpath.
CONF = str(Path(__file__).resolve().parent / "conf")


def hydra_main() -> None:
    """The Hydra app of conf/config.yaml, built here so that Hydra is imported only to run."""
    import hydra
    from omegaconf import DictConfig

    from ragexp.config.overrides import for_hydra

    sys.argv[1:] = for_hydra(sys.argv[1:])  # system.params.top_k=3; -m judge=llm,triad judge.endpoint.base_url=URL

    @hydra.main(version_base="1.3", config_path=CONF, config_name="config")
    def evaluate(cfg: DictConfig) -> float | None:
        from ragexp.run.app import execute

        return execute(cfg)

    evaluate()


def config_error(err: BaseException | None) -> bool:
    """Hydra's own config mistakes (an unknown option or key, a bad override) and ragexp's: bad input."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ragexp.errors import RagexpError

    return isinstance(err, (HydraException, OmegaConfBaseException, RagexpError))


def guarded(app, config: str = "config") -> None:
    """Runs a Hydra app (`python -m ragexp`, `.synth`, `.monitor`; `config`: its file in conf/):
    `--help` is ragexp's own, written from conf/ (ragexp.config.docs) without composing a config;
    refuses a command line that carries a secret before Hydra writes it to `.hydra/`; Hydra reports
    its config errors with exit status 1, which becomes 2 (bad input) as for ragexp's own."""
    from ragexp.config.docs import print_help_if_asked
    from ragexp.errors import BAD_INPUT
    from ragexp.secrets import refuse_secret_overrides

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


def main() -> None:
    from ragexp.config.corpus_groups import refused_override
    from ragexp.errors import BAD_INPUT

    refused = refused_override(sys.argv[1:])
    if refused:  # Hydra would say "No match in the defaults list" and suggest +chunker=..., which is wrong
        print(f"ragexp: error: {refused}", file=sys.stderr)
        sys.exit(BAD_INPUT)
    guarded(hydra_main)


if __name__ == "__main__":
    main()
