"""Every run owns its folder and its MLflow run, whatever else runs on the machine: the default run
and sweep folders go down to the microsecond, and a folder another live run holds is refused
before anything is written (runs started in the same second shared one folder and logged each
other's params and scores)."""
import json
import re
import subprocess
import sys
import time

import pytest

from conftest import HASH, cli_env, mlflow_runs, run_app
from ragexp.base.processes import alive, started, this_process
from ragexp.store.run_owner import OWNER

CHEAP = (*HASH, "retriever=bm25", "dataset.limit=2", "cache.enabled=false")


def test_the_default_run_folders_go_down_to_the_microsecond(tmp_path):
    for _ in range(2):
        proc = run_app(*CHEAP, "tracker=none", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    folders = sorted(p.parent for p in (tmp_path / "outputs").glob("*/*/results.json"))
    assert len(folders) == 2
    assert all(re.fullmatch(r"\d{2}-\d{2}-\d{2}-\d{6}", f.name) for f in folders), folders


def test_a_folder_another_live_run_holds_is_refused_and_a_dead_ones_taken_over(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)  # alive until killed
    try:
        folder = tmp_path / "run"
        folder.mkdir()
        holder = {**this_process(), "pid": other.pid, "started": started(other.pid)}
        (folder / OWNER).write_text(json.dumps(holder))
        assert alive(holder)
        proc = run_app(*CHEAP, "tracker=none", f"hydra.run.dir={folder}", cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"is in use by another run (process {other.pid} on" in proc.stderr
        assert not (folder / "results.json").exists()
    finally:
        other.kill()
        other.communicate()
    assert not alive(holder)
    proc = run_app(*CHEAP, "tracker=none", f"hydra.run.dir={folder}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (folder / "results.json").exists() and json.loads((folder / OWNER).read_text())["pid"] != other.pid


def test_a_reused_pid_is_not_the_process_that_was_recorded():
    me = this_process()
    assert alive(me)
    assert not alive({**me, "started": (me["started"] or 0) + 1})  # the same pid, started at another time
    assert alive({**me, "host": "another-host"})  # nothing here can tell: left as it is


@pytest.mark.process
def test_runs_started_together_each_log_their_own_folder_and_scores(tmp_path):
    """Four runs started in the same second on one store, each with another chunker: four folders, four
    MLflow runs, each with its own name, params and scores (three shared one folder before)."""
    store = f"tracker.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"
    first = run_app(*CHEAP, store, "chunker=recursive", cwd=tmp_path)  # the store exists before the four start
    assert first.returncode == 0, first.stderr
    chunkers = ["recursive", "sentence", "token", "fixed"]
    procs = [subprocess.Popen([sys.executable, "-m", "ragexp", *CHEAP, store, f"chunker={c}"], cwd=tmp_path,
                              env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in chunkers]
    deadline = time.time() + 300
    outputs = [p.communicate(timeout=max(1, deadline - time.time())) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in outputs]
    folders = {p.parent for p in (tmp_path / "outputs").glob("*/*/results.json")}
    assert len(folders) == 5
    _, runs = mlflow_runs(tmp_path)
    assert len(runs) == 5 and all(r.info.status == "FINISHED" for r in runs)
    named = sorted((r.info.run_name, r.data.params["chunker._target_"].rsplit(".", 1)[-1]) for r in runs)
    assert named == sorted([(f"sample-{c}-hash-bm25-extractive", f"{c.capitalize()}Chunker") for c in chunkers]
                           + [("sample-recursive-hash-bm25-extractive", "RecursiveChunker")])
    scores = {r.info.run_name: r.data.metrics["avg_context_relevance"] for r in runs}
    for folder in folders:  # each folder's scores are those its own MLflow run carries
        [values] = json.loads((folder / "results.json").read_text()).values()
        meta = json.loads((folder / "run.json").read_text())
        assert values["avg_context_relevance"] == pytest.approx(scores[meta["name"]])
