import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
SHARED_DATA = ROOT.parent / "shared" / "data"


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
