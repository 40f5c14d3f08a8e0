"""A single run's MLflow logging made ready while the run works (ragexp.store.log_ahead): the job's
process never imports MLflow, a helper process logs the folder; when the helper is gone the job
logs itself; a helper started with the command and not needed ends unused."""
import subprocess
import sys

import pytest

from conftest import HASH, cli_env
from ragexp.store import log_ahead, sweep_logging
from ragexp.config.build import from_yaml


@pytest.mark.process
def test_the_jobs_process_never_imports_mlflow_and_the_run_is_logged(tmp_path):
    import mlflow

    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "ragexp", *HASH, "retriever=bm25", "dataset.limit=3"],
                          cwd=tmp_path, capture_output=True, text=True, env=cli_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and not any(name.split(".")[0] == "mlflow" for name in imported)
    [run] = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_runs(["1"])
    assert run.info.status == "FINISHED" and run.data.tags["ragexp.job_pid"] == str(proc_pid(tmp_path))
    assert run.data.tags["ragexp.pid"] != run.data.tags["ragexp.job_pid"]  # logged by the helper
    assert f"run {run.info.run_id}" in proc.stdout and f"/runs/{run.info.run_id}/traces" in proc.stdout


def proc_pid(folder) -> int:
    import json

    [meta] = [json.loads(p.read_text()) for p in folder.glob("outputs/*/*/run.json")]
    return meta["process"]["pid"]


def test_without_its_helper_the_job_logs_the_folder_itself(tmp_path, monkeypatch):
    from conftest import compose
    from ragexp.run.pipeline import run as run_pipeline
    from ragexp.store.run_folder import write_results
    from ragexp.store.run_config import write_config

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = run_pipeline(compose(*HASH, "retriever=bm25", "dataset.limit=2", f"cache.dir={tmp_path / 'cache'}"), "x")
    folder = tmp_path / "run"
    folder.mkdir()
    write_results(result, folder)
    write_config(folder, {"judge": {"_target_": "ragexp.judges.offline.OfflineJudge"}})
    ahead = log_ahead.LoggedAhead(from_yaml("tracker/mlflow", experiment="ahead", tracking_uri=uri))
    ahead.process.kill()  # the helper died
    ahead.process.wait()
    run_id = ahead.log_folder(folder)
    import mlflow

    assert mlflow.MlflowClient(uri).get_run(run_id).info.status == "FINISHED"
    assert ahead.ui_link(run_id).endswith(f"/runs/{run_id}/traces")


@pytest.mark.parametrize("argv, starts", [
    (["retriever=bm25"], True),
    (["-m", "retriever=bm25,dense"], False),
    (["tracker=none"], False),
    (["--help"], False),
    (["dry_run=true"], False),
])
def test_a_helper_starts_with_a_single_run_that_may_log_and_ends_unused(argv, starts):
    from ragexp.base import children

    helper = log_ahead.start_early(argv)
    assert (helper is not None) is starts
    if helper is not None:
        assert helper in children.running() and helper.name == log_ahead.NAME  # stopped at this process's exit
        helper.stop()  # a run that does not log (the job's door): ended, nothing logged
        assert helper.process.returncode is not None and helper not in children.running()


@pytest.mark.process
def test_the_helper_ends_with_the_jobs_process():
    """SIGKILL to the job's process ends its helper too: one job, killed as one (a run the helper was
    logging stays RUNNING for the next command to close, tests/test_kill9.py)."""
    import os
    import signal
    import time

    script = ("import subprocess, time; from ragexp.store import log_ahead; helper = log_ahead.start_early([]).process; "
              "keeper = subprocess.Popen(['sleep', '60'], pass_fds=(helper.stdin.fileno(),)); "
              "print(helper.pid, keeper.pid, flush=True); time.sleep(60)")
    job = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=cli_env())
    helper, keeper = map(int, job.stdout.readline().split())  # keeper: holds the helper's input open (no EOF)
    try:
        time.sleep(0.5)
        os.kill(job.pid, signal.SIGKILL)
        job.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "Z" not in state(helper):
            time.sleep(0.05)
        assert "Z" in state(helper)  # ended by its watch on the job, not by an end of its input
    finally:
        os.kill(keeper, signal.SIGKILL)


def state(pid: int) -> str:
    """A process's state letter (Z: ended, its parent not yet told)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def run_folders(tmp_path, names):
    """Run folders as jobs write them (results, config), one per name."""
    from conftest import compose
    from ragexp.run.pipeline import run as run_pipeline
    from ragexp.store.run_folder import write_results
    from ragexp.store.run_config import write_config

    folders = []
    for name in names:
        result = run_pipeline(compose(*HASH, "retriever=bm25", "dataset.limit=2", f"cache.dir={tmp_path / 'cache'}"), name)
        folder = tmp_path / name
        folder.mkdir()
        write_results(result, folder)
        write_config(folder, {"run_name": name, "judge": {"_target_": "ragexp.judges.offline.OfflineJudge"}})
        folders.append(folder)
    return folders


def test_a_sweeps_helper_opens_its_parent_run_and_logs_its_jobs_folders_while_they_run(tmp_path, monkeypatch):
    """The sweep's helper makes the parent run (with the sweep's own pid), takes a job's folder
    without a wait and logs it under that parent; a job logging elsewhere is not given to it; a
    folder it cannot log comes back from `finish` with the store's reason."""
    import mlflow

    from ragexp.store.trackers import MlflowTracker

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    a, b = run_folders(tmp_path, ["a", "b"])
    (b / "run.json").unlink()  # not a folder a job writes: its logging fails
    from ragexp.base import children

    helper = sweep_logging.SweepLogging.start()
    assert helper.child in children.running()  # a child of this process: stopped at its exit at the latest
    opened = helper.open_sweep(from_yaml("tracker/mlflow", experiment="sweeps", tracking_uri=uri), "sweep x", {"sweep_overrides": "o", "ragexp.pid": "4242"})
    assert opened["store"] == uri and "sweeps" in opened["where"]
    parent = opened["parent_id"]
    job = helper.queued(from_yaml("tracker/mlflow", experiment="sweeps", tracking_uri=uri), "a", 0)
    assert isinstance(job, sweep_logging.Queued) and job.where() == opened["where"]
    assert helper.queued(from_yaml("tracker/mlflow", experiment="elsewhere", tracking_uri=uri), "c", 2).__class__ is MlflowTracker
    assert job.log_folder(a, parent) is None  # handed over: no run id yet
    assert helper.queued(from_yaml("tracker/mlflow", experiment="sweeps", tracking_uri=uri), "b", 1).log_folder(b, parent) is None
    failed = helper.finish(from_yaml("tracker/mlflow", experiment="sweeps", tracking_uri=uri))
    assert helper.child not in children.running() and helper.process.returncode == 0
    assert [(f["name"], f["job"], f["folder"]) for f in failed] == [("b", 1, str(b.resolve()))]
    assert "run.json" in failed[0]["error"]
    client = mlflow.MlflowClient(uri)
    [sweep] = client.search_runs([client.get_experiment_by_name("sweeps").experiment_id], "tags.`ragexp.role` = 'sweep'")
    assert sweep.info.run_id == parent and sweep.data.tags["ragexp.pid"] == "4242"
    [child] = client.search_runs([sweep.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")
    assert child.info.run_name == "a" and child.info.status == "FINISHED"
    assert child.data.tags["ragexp.pid"] == str(helper.process.pid)  # logged by the helper


def test_a_folder_its_helper_did_not_log_is_logged_by_the_sweep_itself(tmp_path, monkeypatch):
    """The helper dies mid-sweep: what it was given and did not log is logged by the sweep's
    process at its end, and what comes after is logged by each job: nothing is lost, nothing twice."""
    import mlflow


    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    a, b = run_folders(tmp_path, ["a", "b"])
    helper = sweep_logging.SweepLogging.start()
    parent = helper.open_sweep(from_yaml("tracker/mlflow", experiment="sweeps", tracking_uri=uri), "sweep y", {"sweep_overrides": "o"})["parent_id"]
    helper.sent[str(a.resolve())] = {"parent_id": parent, "name": "a", "job": 0}  # given, as the helper dies
    helper.process.kill()
    helper.process.wait()
    assert helper.queued(from_yaml("tracker/mlflow", experiment="sweeps", tracking_uri=uri), "b", 1).log_folder(b, parent) is not None  # logged by the job
    assert helper.finish(from_yaml("tracker/mlflow", experiment="sweeps", tracking_uri=uri)) == []
    client = mlflow.MlflowClient(uri)
    children = client.search_runs([client.get_experiment_by_name("sweeps").experiment_id],
                                  f"tags.`mlflow.parentRunId` = '{parent}'")
    assert sorted(r.info.run_name for r in children) == ["a", "b"]


def test_a_sweeps_job_its_helper_could_not_log_fails_with_the_command_that_logs_it_later(tmp_path, capsys):
    """As a job that could not log itself: failure.json in its folder (the sweep then exits 4 and
    lists it) with where the results are and `python -m ragexp.track FOLDER`."""
    import json

    from ragexp.sweep.callbacks import SweepTracking

    folder = tmp_path / "3"
    folder.mkdir()
    sweep = SweepTracking()
    sweep.tracker = type("Store", (), {"where": lambda self: "mlflow experiment 'x' at http://127.0.0.1:9"})()
    sweep.record_not_logged([{"folder": str(folder), "name": "chunker=token", "job": 3, "error": "Connection refused\nmore",
                       "kind": "StoreUnreachable"}])
    record = json.loads((folder / "failure.json").read_text())
    assert record["name"] == "chunker=token" and record["job"] == 3 and record["exit_code"] == 4
    assert "(StoreUnreachable: Connection refused)" in record["reason"] and "more" not in record["reason"]
    assert f"python -m ragexp.track {folder}" in record["reason"]
    assert "job 3 (chunker=token) failed" in capsys.readouterr().err


def test_a_sweeps_jobs_are_logged_by_the_helper_its_callback_hands_them(tmp_path):
    """No registry between the sweep and its jobs: the sweep's callback hands its logging helper to
    the task function (ragexp.run.app.Jobs) as each job starts; the jobs' runs are logged by that
    helper, another process, under the sweep's parent run, and it is stopped at the sweep's end."""
    import os

    from conftest import HASH, logged_sweep, run_app
    from ragexp.base import children

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = run_app("-m", *HASH, "retriever=bm25", "retriever.top_k=2,3", "dataset.limit=2", f"tracker.tracking_uri={uri}",
                   f"cache.dir={tmp_path / 'cache'}", "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    _, parent, runs = logged_sweep(uri)
    assert sorted(r.info.run_name for r in runs.values()) == ["top_k=2", "top_k=3"]
    helpers = {r.data.tags["ragexp.pid"] for r in runs.values()}
    assert len(helpers) == 1 and helpers != {str(os.getpid())}  # one helper logged the jobs
    assert parent.data.tags["ragexp.pid"] == str(os.getpid())  # the sweep's process, named in its parent run
    assert {r.data.tags["ragexp.job_pid"] for r in runs.values()} == {str(os.getpid())}  # the jobs ran here
    assert not [c for c in children.running() if c.name == log_ahead.NAME]


def test_a_sweep_stopped_before_its_end_is_ended_by_the_commands_end():
    """A sweep's callback hands a job its helper and how to end the sweep (`Jobs.in_sweep`); a single
    run is handed nothing; when the command ends before the sweep's end (an interrupt: Hydra then
    calls no callback), `Jobs.close` stops the helper and gives Hydra its own composition back."""
    from omegaconf import OmegaConf

    from ragexp.run.app import Jobs
    from ragexp.sweep.callbacks import SweepTracking

    class Helper:  # stands in for SweepLogging: records that it was stopped
        stopped = False

        def gone(self):
            self.stopped = True

    jobs, sweep, helper = Jobs(), SweepTracking(), Helper()
    sweep.on_job_start(OmegaConf.create({}), task_function=jobs)  # a single run: no sweep under way
    assert jobs.sweep_logging is None and jobs.end_sweep is None
    sweep.under_way, sweep.helper = True, helper
    sweep.on_job_start(OmegaConf.create({}), task_function=jobs)
    assert jobs.sweep_logging is helper
    jobs.close()
    assert helper.stopped and sweep.helper is None and jobs.sweep_logging is None and jobs.end_sweep is None
