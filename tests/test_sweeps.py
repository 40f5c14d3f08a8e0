"""Sweeps run in parallel processes (hydra/launcher=joblib) share the cache and the MLflow store;
an Optuna search logs a child run per trial."""
import re

import pytest

from conftest import run_cli
from test_cli import mlflow_runs


def test_a_parallel_sweep_loses_no_run(tmp_path):
    proc = run_cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=4", "retriever=bm25", "dataset.limit=3",
                   "chunker=fixed,recursive,sentence,markdown", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "database is locked" not in proc.stderr
    client, runs = mlflow_runs(tmp_path)
    [parent] = [r for r in runs if r.data.tags.get("ragexp.role") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(c.info.run_name for c in children) == [
        "chunker=fixed", "chunker=markdown", "chunker=recursive", "chunker=sentence"]
    assert all(c.info.status == "FINISHED" and c.data.metrics["total_questions"] == 3 for c in children)
    # the four processes wrote into one cache folder, each its own chunks
    assert (tmp_path / ".ragexp-cache" / "embeddings.sqlite").exists()
    assert len(list((tmp_path / ".ragexp-cache" / "chunks").rglob("*.pkl"))) == 4


@pytest.mark.slow
def test_optuna_search_maximises_overall_score_with_a_child_run_per_trial(tmp_path):
    """+search=optuna (the [optuna] extra, installed by `make test-full`)."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    proc = run_cli("-m", "+search=optuna", "hydra.sweeper.n_trials=3", "dataset.limit=3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    client, runs = mlflow_runs(tmp_path)
    [parent] = [r for r in runs if r.data.tags.get("ragexp.role") == "sweep"]
    trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(trials) == 3
    best = max(t.data.metrics["overall_score"] for t in trials)
    reported = float(re.search(r"Best value: ([\d.]+)", proc.stdout + proc.stderr).group(1))
    assert reported == pytest.approx(best, abs=1e-4)
    # conf/search/optuna.yaml: range(128, 1024, step=64), both ends included by the Optuna sweeper
    assert {t.data.params["chunker.chunk_size"] for t in trials} <= {str(n) for n in range(128, 1025, 64)}
