"""`python -m ragexp`: the Hydra entry point. Keep imports light: `--help` (written from conf/ by
ragexp.config.docs) imports neither Hydra nor any model code."""
import sys

from ragexp.config import CONF
from ragexp.config.hydra_app import guarded


def hydra_main() -> None:
    """The Hydra app of conf/config.yaml, built here so that Hydra is imported only to run."""
    from ragexp.config.overrides import for_hydra
    from ragexp.store.log_ahead import discard, start_early

    sys.argv[1:] = for_hydra(sys.argv[1:])  # system.params.top_k=3; -m judge=llm,triad judge.endpoint.base_url=URL
    start_early(sys.argv[1:])  # MLflow imported in a process of its own while Hydra is imported, composes and the run works
    import hydra
    from omegaconf import DictConfig

    register_plugins()

    @hydra.main(version_base="1.3", config_path=str(CONF), config_name="config")
    def evaluate(cfg: DictConfig) -> float | None:
        from ragexp.run.app import execute

        return execute(cfg)

    try:
        evaluate()
    finally:
        from ragexp.sweep.composed import release

        release()  # a sweep's shared compositions, however it ended
        discard()  # a logging helper no job took (the command stopped before its job)


def register_plugins() -> None:
    """Hydra finds plugins by scanning the folders of the `hydra_plugins` namespace, which an
    editable install's import hook (`make install`) does not add to: from a folder outside the
    checkout, `hydra/sweeper=racing` was an "Unknown plugin class". The racing sweeper is registered
    by hand (the same class the scan finds in a wheel's site-packages or a checkout)."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.ragexp_racing import RacingSweeper

    Plugins.instance().register(RacingSweeper)


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
