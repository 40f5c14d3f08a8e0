"""Many people on one machine: 8 runs and 2 two-point sweeps started in the same second on one new
MLflow SQLite store and one stage cache. Each process logs its own runs only (names, params and
scores from its own folders), nothing is lost, the store is not broken, and every MLflow run ends
FINISHED. Three repeats here; `make bench` has the long version's figures."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import HASH, cli_env, mlflow_runs
from ragexp.store.reviews import question_traces
from ragexp.store.run_owner import OWNER

CHUNKERS = ("recursive", "sentence", "token", "fixed")
RETRIEVERS = ("bm25", "dense_exact")
SINGLES = [{"chunker": c, "retriever": r} for c in CHUNKERS for r in RETRIEVERS]
SWEEPS = [{"chunker": "recursive,token", "retriever": "bm25"}, {"chunker": "sentence,fixed", "retriever": "dense_exact"}]


def started_together(tmp_path: Path) -> list[tuple[subprocess.Popen, dict]]:
    common = [*HASH, "dataset.limit=3", f"cache.dir={tmp_path / 'cache'}",
              f"tracker.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"]
    commands = [([f"{k}={v}" for k, v in s.items()], s) for s in SINGLES]
    commands += [(["-m", *(f"{k}={v}" for k, v in s.items())], s) for s in SWEEPS]  # -m first: then the overrides
    return [(subprocess.Popen([sys.executable, "-m", "ragexp", *args[:1], *common, *args[1:]], cwd=tmp_path, env=cli_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), settings)
            for args, settings in commands]


def folders_of(tmp_path: Path) -> dict[int, list[Path]]:
    """pid -> the run folders (those with a run.json) whose owner file names that process."""
    found: dict[int, list[Path]] = {}
    for meta in sorted([*tmp_path.glob("outputs/**/run.json"), *tmp_path.glob("multirun/**/run.json")]):
        owner = json.loads((meta.parent / OWNER).read_text())
        found.setdefault(owner["pid"], []).append(meta.parent)
    return found


def params_of(run) -> tuple[str, str]:
    """The chunker and retriever an MLflow run logged, as the command line names them."""
    p = run.data.params
    chunker = p["chunker._target_"].rsplit(".", 1)[-1].removesuffix("Chunker").lower()
    return chunker, "bm25" if p["retriever._target_"].endswith("BM25Retriever") else "dense_exact"


@pytest.mark.process
@pytest.mark.parametrize("repeat", range(3))
def test_eight_runs_and_two_sweeps_started_together_keep_to_their_own(tmp_path, repeat):
    procs = started_together(tmp_path)
    deadline = time.time() + 600
    outputs = [p.communicate(timeout=max(1, deadline - time.time())) for p, _ in procs]
    assert [p.returncode for p, _ in procs] == [0] * len(procs), [err[-2000:] for _, err in outputs if err]
    assert not list(tmp_path.glob("mlflow.db.broken-*"))
    folders = folders_of(tmp_path)
    _, runs = mlflow_runs(tmp_path)
    assert len(runs) == len(SINGLES) + 3 * len(SWEEPS) and all(r.info.status == "FINISHED" for r in runs)
    by_pid: dict[int, list] = {}
    for run in runs:
        by_pid.setdefault(int(run.data.tags.get("ragexp.job_pid", run.data.tags["ragexp.pid"])), []).append(run)
    for proc, settings in procs:
        mine = by_pid[proc.pid]
        jobs = [r for r in mine if "mlflow.parentRunId" in r.data.tags or len(mine) == 1]
        expected = sorted((c, settings["retriever"]) for c in settings["chunker"].split(","))
        assert sorted(params_of(r) for r in jobs) == expected, f"process {proc.pid} logged another's params"
        assert len(folders[proc.pid]) == len(expected)  # nothing lost
        for folder in folders[proc.pid]:  # each folder's scores are those of the MLflow run with its name
            meta = json.loads((folder / "run.json").read_text())
            [values] = json.loads((folder / "results.json").read_text()).values()
            [run] = [r for r in jobs if r.info.run_name == meta["name"]]
            assert run.data.metrics["overall_score"] == pytest.approx(values["overall_score"])
            assert run.data.metrics["mrr"] == pytest.approx(values["mrr"])
            # its per-question records (light traces, on by default): one per question of its own folder
            asked = [json.loads(line)["question_id"] for line in (folder / "questions.jsonl").read_text().splitlines()]
            recorded = question_traces(run.info.run_id, run.info.experiment_id)
            assert sorted(recorded) == sorted(asked), f"run {run.info.run_name}: its question records differ"
