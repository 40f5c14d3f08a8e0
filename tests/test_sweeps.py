"""Sweeps run in parallel processes (hydra/launcher=joblib) share the cache and the MLflow store;
an Optuna search logs a child run per trial; a Ray sweep runs its jobs as tasks of a local Ray instance;
hydra/launcher=submitit_local runs each job as a process of its own, through submitit."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import HASH, free_port, logged_sweep, mlflow_runs, require_engine, run_cli


@pytest.mark.process
def test_a_parallel_sweep_loses_no_run(tmp_path):
    proc = run_cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=4", "retriever=bm25", "dataset.limit=3",
                   "chunker=fixed,recursive,sentence,markdown", *HASH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "database is locked" not in proc.stderr
    client, runs = mlflow_runs(tmp_path)
    [parent] = [r for r in runs if r.data.tags.get("ragexp.role") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(c.info.run_name for c in children) == ["fixed", "markdown", "recursive", "sentence"]
    assert all(c.info.status == "FINISHED" and c.data.metrics["total_questions"] == 3 for c in children)
    # the four processes wrote into one cache folder, each its own chunks
    assert (tmp_path / ".ragexp-cache" / "embeddings.sqlite").exists()
    assert len(list((tmp_path / ".ragexp-cache" / "chunks").rglob("*.json"))) == 4


@pytest.mark.engines
def test_optuna_search_maximises_overall_score_with_a_child_run_per_trial(tmp_path):
    """+search=optuna (the [optuna] extra, installed by `make test-engines`): a child run per trial,
    named by its values, with its place on the sweep's leaderboard as a grid sweep's runs have it."""
    require_engine("optuna")
    proc = run_cli("-m", "+search=optuna", "hydra.sweeper.n_trials=3", "dataset.limit=3", *HASH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    client, parent, children = logged_sweep(f"sqlite:///{tmp_path / 'mlflow.db'}")
    trials = list(children.values())
    assert len(trials) == 3
    best = max(t.data.metrics["overall_score"] for t in trials)
    reported = float(re.search(r"Best value: ([\d.]+)", proc.stdout + proc.stderr).group(1))
    assert reported == pytest.approx(best, abs=1e-4)
    # conf/search/optuna.yaml: range(128, 1024, step=64), both ends included by the Optuna sweeper
    assert {t.data.params["chunker.chunk_size"] for t in trials} <= {str(n) for n in range(128, 1025, 64)}
    # each trial's run named by its values of the searched settings, in the search's order, as a grid's jobs are
    searched = ["chunker.chunk_size", "chunker.chunk_overlap", "retriever.top_k", "retriever.weights.dense"]
    assert sorted(t.info.run_name for t in trials) == sorted(" · ".join(f"{k.rsplit('.', 1)[1]}={t.data.params[k]}" for k in searched) for t in trials)
    assert len({t.info.run_name for t in trials}) == 3
    # and its place on the sweep's leaderboard, as a grid sweep's runs carry it (the runs table sorts by it):
    # the rank and verdict of the sweep's own report, the objective's interval around its estimate
    [sweep_dir] = tmp_path.glob("multirun/*/*")
    board = json.loads((sweep_dir / "report" / "leaderboard.json").read_text())["entries"]
    ranked = sorted(trials, key=lambda t: t.data.metrics["leaderboard_rank"])
    assert [t.data.metrics["leaderboard_rank"] for t in ranked] == [1, 2, 3]
    assert [(t.info.run_name, t.data.tags["ragexp.verdict"]) for t in ranked] == [(e["label"], e["verdict"]) for e in board]
    assert ranked[0].data.tags["ragexp.verdict"] == "best" and ranked[0].data.metrics["overall_score"] == pytest.approx(best)
    for trial in ranked:
        low, high = trial.data.metrics["overall_score_ci_low"], trial.data.metrics["overall_score_ci_high"]
        assert low <= trial.data.metrics["overall_score"] <= high
    # the link the sweep prints opens its trials only, sorted by that rank
    last = proc.stdout.rstrip().splitlines()[-1]
    view = json.loads(client.get_experiment(parent.info.experiment_id).tags[
        "mlflow.sharedViewState." + last.rsplit("viewStateShareKey=", 1)[1]])
    assert view["orderByKey"] == "metrics.`leaderboard_rank`" and view["orderByAsc"] is True
    assert {r.info.run_id for r in client.search_runs([parent.info.experiment_id], view["searchFilter"])} == set(children)


@pytest.fixture
def local_ray(tmp_path):
    """A local Ray instance (`ray start --head`), started in a folder of its own: its workers begin
    there, not where the sweep is launched. Ray's processes (and the sweep's) get a home folder of
    their own, token authentication off: a `~/.ray/auth_token` another Ray user left on the machine
    is not this cluster's."""
    require_engine("ray")
    home = tmp_path / "ray-home"
    home.mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "ray-user"), "RAY_AUTH_MODE": "disabled"}
    port = free_port()
    ray = Path(sys.executable).with_name("ray")
    log = (tmp_path / "ray-head.log").open("w")
    head = subprocess.Popen([str(ray), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             "--include-dashboard=false", "--disable-usage-stats"],
                            cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 300  # a loaded 2-core machine starts Ray slowly
        while True:
            status = subprocess.run([str(ray), "status", f"--address=127.0.0.1:{port}"], env=env,
                                    capture_output=True, text=True)
            if status.returncode == 0 or time.time() > deadline or head.poll() is not None:
                break
            time.sleep(2)
        assert status.returncode == 0, (f"ray did not start: {status.stderr[-1500:]}\nhead: "
                                        f"{(tmp_path / 'ray-head.log').read_text()[-1500:]}")
        yield SimpleNamespace(address=f"127.0.0.1:{port}", home=home, env={k: env[k] for k in ("HOME", "RAY_AUTH_MODE")})
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # --block: the head stops every Ray process it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        log.close()


@pytest.mark.engines
def test_a_ray_sweep_runs_each_job_on_ray_and_logs_next_to_its_parent(tmp_path, local_ray):
    """+cluster=ray (the [ray] extra, installed by `make test-engines`), against a local Ray instance.
    The shell that launches the sweep points MLflow at a store that Ray's workers know nothing of."""
    work = tmp_path / "work"
    work.mkdir()
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # not ./mlflow.db of the launching folder
    proc = run_cli("-m", "+cluster=ray", "chunker=fixed,recursive", "retriever=bm25", "dataset.limit=3", cwd=work,
                   env={"RAY_ADDRESS": local_ray.address, "MLFLOW_TRACKING_URI": store, **local_ray.env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Connecting to existing Ray cluster" in proc.stderr
    assert len(set(re.findall(r"\(_run_job pid=(\d+)\)", proc.stdout))) >= 1, "the jobs ran as Ray tasks"

    client, runs = mlflow_runs(tmp_path)
    [parent] = [r for r in runs if r.data.tags.get("ragexp.role") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(c.info.run_name for c in children) == ["fixed", "recursive"]
    assert all(c.info.status == "FINISHED" and c.data.metrics["total_questions"] == 3 for c in children)
    # outputs, cache and merged results where the sweep was launched; nothing where Ray started
    [sweep_dir] = work.glob("multirun/*/*")
    assert set(json.loads((sweep_dir / "results.json").read_text())) == {"fixed", "recursive"}
    assert len(list((work / ".ragexp-cache" / "chunks").rglob("*.json"))) == 2
    assert not list(local_ray.home.iterdir()) and not (work / "mlflow.db").exists()


@pytest.mark.engines
def test_a_submitit_sweep_runs_each_job_in_a_process_of_its_own(tmp_path):
    """hydra/launcher=submitit_local: submitit's local executor, the SLURM launcher's code path
    (+cluster=slurm) short of the scheduler: each job is a submitit job, a process of its own."""
    proc = run_cli("-m", "hydra/launcher=submitit_local", "chunker=fixed,recursive", "retriever=bm25", "dataset.limit=3",
                   *HASH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Submitit 'local' sweep output dir" in proc.stdout + proc.stderr
    [sweep_dir] = tmp_path.glob("multirun/*/*")
    # submitit's local executor names each job's folder after the process that ran it
    jobs = [p for p in (sweep_dir / ".submitit").iterdir() if p.name.isdigit()]
    assert len(jobs) == 2 and all(list(job.glob("*_log.out")) for job in jobs)
    client, runs = mlflow_runs(tmp_path)
    [parent] = [r for r in runs if r.data.tags.get("ragexp.role") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(c.info.run_name for c in children) == ["fixed", "recursive"]
    assert all(c.info.status == "FINISHED" and c.data.metrics["total_questions"] == 3 for c in children)
    assert parent.info.status == "FINISHED" and parent.data.tags["ragexp.pid"] not in {j.name for j in jobs}
    assert set(json.loads((sweep_dir / "results.json").read_text())) == {"fixed", "recursive"}
