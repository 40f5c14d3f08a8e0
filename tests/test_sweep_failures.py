"""A sweep survives its worst job: a job that fails while running (a refused key, every question
failed) becomes a FAILED child run with its reason, the other jobs run (also in parallel with
joblib), the merged results, the leaderboard and `python -m ragexp.compare` list the failed jobs,
the parent run ends with the job counts and the command exits 4. A resumed sweep closes every
run its killed predecessor left RUNNING."""
import json
import os

import pytest

from conftest import llm_args, run_cli
from openai_server import auto_reply
from test_cli import mlflow_runs
from ragexp.config.build import from_yaml

pytestmark = pytest.mark.process
ENV = {"RAGEXP_TEST_LLM_KEY": "test-key"}
BASE = ["embedder=hash", "embedder@scoring_embedder=hash", "dataset.limit=3", "judge.endpoint.max_retries=0"]
MODELS = "judge.endpoint.model=ok-model,revoked,broken"


def chat(body):
    """ok-model answers, revoked refuses the key (401: the job stops), broken fails every request (500)."""
    return {"revoked": {"status": 401}, "broken": {"status": 500}}.get(body.get("model"), auto_reply(body))


def failing_sweep(server, cwd, *launcher):
    server.chat = chat
    args = [a for a in llm_args(server, generator=False) if not a.startswith("judge.endpoint.model=")]
    return run_cli("-m", *launcher, *args, *BASE, MODELS, cwd=cwd, env=ENV)


def check_sweep(proc, cwd):
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert "2 of 3 jobs failed" in proc.stderr
    [sweep_dir] = cwd.glob("multirun/*/*")
    merged = json.loads((sweep_dir / "results.json").read_text())
    assert merged["ok-model"]["failed_questions"] == 0
    assert "status" not in merged["ok-model"]
    revoked, broken = merged["revoked"], merged["broken"]
    assert revoked["status"] == "failed" and "refused the key" in revoked["failure_reason"]
    assert broken["status"] == "failed" and "all 3 questions failed" in broken["failure_reason"]
    assert broken["total_questions"] == 3  # it measured: its aggregates are kept beside the reason

    client, runs = mlflow_runs(cwd)
    [parent] = [r for r in runs if r.data.tags.get("ragexp.role") == "sweep"]
    assert parent.info.status == "FAILED"
    assert parent.data.metrics == {"jobs_total": 3.0, "jobs_ok": 1.0, "jobs_failed": 2.0}
    children = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert children["ok-model"].info.status == "FINISHED"
    for name in ("revoked", "broken"):
        child = children[name]
        assert child.info.status == "FAILED"
        assert child.data.tags["ragexp.failure_reason"] == merged[name]["failure_reason"]
        assert child.data.params["judge.endpoint.model"] == name
    report = (sweep_dir / "report" / "report.md").read_text()
    assert "## Incomplete sweep" in report and "2 of 3 jobs did not finish" in report
    assert "- revoked (" in report and "refused the key" in report
    assert "INCOMPLETE sweep: 2 of 3 jobs did not finish" in proc.stdout
    return sweep_dir, parent


def test_a_failing_job_does_not_stop_the_sweep(server, tmp_path, capsys):
    sweep_dir, parent = check_sweep(failing_sweep(server, tmp_path), tmp_path)
    from ragexp.compare.__main__ import main as compare

    code = compare([parent.info.run_id, "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--no-plots",
                    "--no-log", "--resamples", "50", "--out", str(tmp_path / "cmp")])
    out = capsys.readouterr().out
    assert code == 0
    assert "INCOMPLETE sweep: 2 of 3 jobs did not finish" in out
    assert "failed: broken (" in out and "all 3 questions failed" in out
    board = json.loads((tmp_path / "cmp" / "leaderboard.json").read_text())
    assert board["incomplete"] and len(board["failed_jobs"]) == 2 and len(board["entries"]) == 1


def test_a_failing_job_does_not_lose_its_parallel_neighbours(server, tmp_path):
    check_sweep(failing_sweep(server, tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"), tmp_path)


def test_a_resumed_sweep_closes_the_runs_its_killed_predecessor_left_running(tmp_path):
    """The predecessor's parent run and a child killed while it was being logged stay RUNNING;
    the same sweep started again marks both KILLED, resumed by the new parent run."""

    tracker = from_yaml("tracker/mlflow", experiment="ragexp", tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    tags = {"sweep_overrides": "retriever=bm25,dense", "sweep_dir": str(tmp_path)}
    dead = tracker.start_sweep("sweep killed", tags)
    client = tracker.client()
    client.set_tag(dead, "ragexp.pid", str(dead_pid()))
    child = client.create_run(tracker._experiment_id, run_name="retriever=bm25",
                              tags={"mlflow.parentRunId": dead}).info.run_id
    other_sweep = tracker.start_sweep("sweep other", {**tags, "sweep_overrides": "retriever=hybrid"})
    client.set_tag(other_sweep, "ragexp.pid", str(dead_pid()))

    successor = tracker.start_sweep("sweep resumed", tags)
    for run_id in (dead, child):
        run = client.get_run(run_id)
        assert run.info.status == "KILLED" and run.data.tags["ragexp.resumed_by"] == successor
    assert client.get_run(other_sweep).info.status == "RUNNING"  # another sweep's: not this one's to close
    assert client.get_run(successor).info.status == "RUNNING"


def dead_pid() -> int:
    """A process id with no process on this host."""
    pid = os.getpid() + 100_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid += 1

