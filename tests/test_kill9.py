"""A run killed with SIGKILL (no handler runs) at 10 or more points of its life, from its start to its
last logging call (its helper process, which logs it, ends with it), on one SQLite MLflow store:
once the killed job's processes are gone, the next command leaves no run of a dead process
RUNNING, finishes its own run, and a run another live process holds stays RUNNING."""
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from conftest import HASH, cli_env, processes_in, run_cli
from ragexp.base.processes import this_process

POINTS = 10


@pytest.mark.process
def test_a_run_killed_at_any_point_is_closed_by_the_next_command(tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = (*HASH, "retriever=bm25", "dataset.limit=3", f"tracker.tracking_uri={uri}", f"cache.dir={tmp_path / 'cache'}")
    assert run_cli(*args, cwd=tmp_path).returncode == 0  # makes the store
    started = time.monotonic()
    timed = run_cli(*args, cwd=tmp_path)  # a whole run's life on the store
    life = time.monotonic() - started
    assert timed.returncode == 0, timed.stderr
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("ragexp").experiment_id
    me = this_process()  # this test's process is alive throughout: a run it holds must stay RUNNING
    live = client.create_run(experiment, run_name="live", tags={
        "ragexp.host": me["host"], "ragexp.pid": str(me["pid"]), "ragexp.process_started": str(me["started"])}).info.run_id

    def being_logged(victim) -> bool:
        """Whether the victim's MLflow run is open (read from the store's tables: a millisecond, where
        the client's search takes tens of them and the logging window lasts a few hundred)."""
        try:
            with sqlite3.connect(f"file:{tmp_path / 'mlflow.db'}?mode=ro", uri=True, timeout=0.1) as db:
                return db.execute("SELECT COUNT(*) FROM runs JOIN tags ON runs.run_uuid = tags.run_uuid WHERE "
                                  "runs.status = 'RUNNING' AND tags.key IN ('ragexp.pid', 'ragexp.job_pid') "
                                  "AND tags.value = ?", (str(victim.pid),)).fetchone()[0] > 0
        except sqlite3.OperationalError:  # the store is being written this instant
            return False

    def killed_at(point: int) -> bool:
        """Kills a run at `point` (1 to POINTS - 2: spread over its life; above: as soon as its MLflow
        run is open) and checks what the next command leaves; whether the kill left a run RUNNING."""
        victim = subprocess.Popen([sys.executable, "-m", "ragexp", *args], cwd=tmp_path, env=cli_env(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if point <= POINTS - 2:
            time.sleep(life * point / (POINTS - 1))
        else:
            deadline = time.monotonic() + 3 * life
            while victim.poll() is None and not being_logged(victim) and time.monotonic() < deadline:
                time.sleep(0.001)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        # its logging helper ends itself once it sees the job gone (within log_ahead.WATCH_S, longer at load):
        # until then it holds the run it logs (which the next command rightly leaves RUNNING), or ends it
        deadline = time.monotonic() + 60
        while (left := processes_in(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"after the kill at point {point}, the job's processes {left} still run 60 s later"
        left_running = being_logged(victim)
        after = run_cli(*args, cwd=tmp_path)
        assert after.returncode == 0, f"after the kill at point {point}: {after.stderr[-2000:]}"
        runs = client.search_runs([experiment])
        running = [r.info.run_id for r in runs if r.info.status == "RUNNING"]
        assert running == [live], f"after the kill at point {point}, left RUNNING: {running}"
        newest = max((r for r in runs if r.info.run_id != live), key=lambda r: r.info.start_time)
        assert newest.info.status == "FINISHED"
        return left_running

    for point in range(1, POINTS - 1):
        killed_at(point)
    # then killed while logged, until two kills left a run RUNNING (at load the helper may end it first)
    killed_while_logging = tries = 0
    while killed_while_logging < 2 and tries < 8:
        tries += 1
        killed_while_logging += killed_at(POINTS - 2 + tries)
    assert not list(tmp_path.glob("mlflow.db.broken-*"))
    assert killed_while_logging >= 1, f"none of the {tries} kills meant to fall while a run was logged left it RUNNING"
