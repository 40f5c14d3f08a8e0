import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
SHARED_DATA = ROOT.parent / "shared" / "data"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on, for a server a test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def compose(*overrides: str):
    """The job config Hydra would build for `python -m ragexp <overrides>`."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


@pytest.fixture(scope="session")
def minilm():
    from ragexp.embedders import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


def run_cli(*args: str, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """`python -m ragexp ARGS` in `cwd`, as a user would run it."""
    full_env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}  # MLflow's default store in cwd
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "ragexp", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def server():
    """A fresh OpenAI-protocol server on 127.0.0.1 (tests/openai_server.py)."""
    from openai_server import OpenAIServer

    with OpenAIServer() as s:
        yield s


TEST_KEY_ENV = "RAGEXP_TEST_LLM_KEY"


def llm_args(server, judge: str = "llm", model: str = "gpt-4o-mini", generator: bool = True, **settings) -> list[str]:
    """CLI overrides for an offline-fast run against `server`: BM25 (no embedding model), the
    LLM generator (unless generator=False) and the `judge` option on the test server, key in
    $RAGEXP_TEST_LLM_KEY, fast backoff; `settings` are extra key=value overrides."""
    args = ["retriever=bm25", f"judge={judge}", f"judge.endpoint.base_url={server.base_url}",
            f"judge.endpoint.model={model}", f"judge.endpoint.api_key_env={TEST_KEY_ENV}", "judge.endpoint.backoff_s=0.01"]
    if judge == "triad":
        args.append("weights=triad")
    if generator:
        args += ["generator=openai", f"generator.endpoint.base_url={server.base_url}",
                 f"generator.endpoint.model={model}", f"generator.endpoint.api_key_env={TEST_KEY_ENV}",
                 "generator.endpoint.backoff_s=0.01"]
    return args + [f"{k}={v}" for k, v in settings.items()]


@pytest.fixture(scope="session")
def small_sweep(tmp_path_factory):
    """One small real sweep shared by the sweep, compare and browser tests: `python -m ragexp -m
    retriever=dense,bm25 dataset.limit=6`, logged to an MLflow sqlite store in its own folder, its
    leaderboard report made by the multirun callback."""
    cwd = tmp_path_factory.mktemp("small-sweep")
    proc = run_cli("-m", "retriever=dense,bm25", "dataset.limit=6", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    [sweep_dir] = cwd.glob("multirun/*/*")
    return SimpleNamespace(cwd=cwd, proc=proc, sweep_dir=sweep_dir, uri=f"sqlite:///{cwd / 'mlflow.db'}")
