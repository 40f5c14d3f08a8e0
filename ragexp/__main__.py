"""`python -m ragexp`: the Hydra entry point. Keep imports light: `--help` (written from conf/ by
ragexp.config.docs) imports neither Hydra nor any model code."""
import sys

from ragexp.config import CONF
from ragexp.config.hydra_app import guarded


def hydra_main() -> None:
    """The Hydra app of conf/config.yaml, built here so that Hydra is imported only to run."""
    from ragexp.config.overrides import for_hydra
    from ragexp.store.log_ahead import start_early

    sys.argv[1:] = for_hydra(sys.argv[1:])  # system.params.top_k=3; -m judge=llm,triad judge.endpoint.base_url=URL
    early = start_early(sys.argv[1:])  # MLflow imported in a process of its own while Hydra is imported, composes and the run works
    import hydra

    from ragexp.run.app import Jobs

    register_plugins()
    jobs = Jobs(early)  # the task function, holding the logging helpers its jobs are handed
    try:
        hydra.main(version_base="1.3", config_path=str(CONF), config_name="config")(jobs)()
    finally:
        jobs.close()  # a logging helper no job took; a sweep stopped before its end


def register_plugins() -> None:
    """Hydra finds plugins by scanning the folders of the `hydra_plugins` namespace, which an
    editable install's import hook (`make install`) does not add to: from a folder outside the
    checkout, `hydra/sweeper=racing` was an "Unknown plugin class". The racing sweeper is registered
    by hand (the same class the scan finds in a wheel's site-packages or a checkout)."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.ragexp_racing import RacingSweeper

    Plugins.instance().register(RacingSweeper)


def main() -> None:
    from ragexp.base.stops import stopped_by_signals
    from ragexp.config.corpus_groups import refused_override
    from ragexp.errors import BAD_INPUT

    refused = refused_override(sys.argv[1:])
    if refused:  # Hydra would say "No match in the defaults list" and suggest +chunker=..., which is wrong
        print(f"ragexp: error: {refused}", file=sys.stderr)
        sys.exit(BAD_INPUT)
    with stopped_by_signals():  # SIGTERM, Ctrl-C: one line, exit 143 or 130, a run being logged ends KILLED
        guarded(hydra_main)


def command() -> None:
    """`python -m ragexp` and the `ragexp` script: `main`, then the process ends as Python would end
    it (other threads joined, exit handlers run, output flushed) but without tearing down every
    module it imported, one object at a time: 1.1 s at the end of a sweep on the 2-core machine,
    after its results, report and runs are all written. An unexpected exception ends it as usual."""
    import atexit
    import os
    import threading

    from ragexp.base.stops import STOPPED

    try:
        main()
        code: object = 0
    except SystemExit as done:
        code = done.code
    if code not in STOPPED:  # stopped by a signal: the requests still under way are not waited for
        threading._shutdown()  # type: ignore[attr-defined] # what Python calls at exit: its thread pools told to stop, then joined
    atexit._run_exitfuncs()
    if code is not None and not isinstance(code, int):  # sys.exit("message"), as Python says it
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


if __name__ == "__main__":
    command()
