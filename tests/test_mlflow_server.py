"""A real `mlflow server` on 127.0.0.1 as the store: a parallel sweep logs to it over HTTP with its
artifacts served by it; when the server is gone, the run's folder keeps everything and
`python -m ragexp.track FOLDER` logs it once the server is back."""
import json
import subprocess
import sys

import pytest

from conftest import HASH, cli_env, free_port, mlflow_server, run_cli

pytestmark = pytest.mark.process
FAST_FAIL = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}


def test_a_joblib_sweep_logs_to_the_server_with_its_artifacts(tmp_path):
    store = tmp_path / "server"
    with mlflow_server(f"sqlite:///{store / 'store.db'}", store) as url:
        work = tmp_path / "work"
        work.mkdir()
        proc = run_cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "retriever=bm25,dense",
                       "dataset.limit=3", *HASH, f"tracker.tracking_uri={url}", cwd=work, env=FAST_FAIL)
        assert proc.returncode == 0, proc.stderr
        import mlflow

        client = mlflow.MlflowClient(url)
        experiment = client.get_experiment_by_name("ragexp")
        runs = client.search_runs([experiment.experiment_id])
        children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
        assert len(runs) == 3 and {r.info.status for r in runs} == {"FINISHED"} and len(children) == 2
        [sweep_dir] = work.glob("multirun/*/*")
        merged = json.loads((sweep_dir / "results.json").read_text())
        for child in children:
            assert child.info.artifact_uri.startswith("mlflow-artifacts:")  # served by the server, not a local path
            assert child.data.metrics["overall_score"] == merged[child.info.run_name]["overall_score"]
            names = {a.path for a in client.list_artifacts(child.info.run_id)}
            assert {"questions.json", "run.trec", "qrels.trec", "questions.jsonl", "config.yaml"} <= names
            table = json.loads(open(client.download_artifacts(child.info.run_id, "questions.json", str(tmp_path))).read())
            assert len(table["data"]) == 3
        assert not (work / "mlflow.db").exists() and not (work / "mlruns").exists()
        report = (sweep_dir / "report" / "report.md").read_text()  # its tables downloaded from the server
        assert all(f"| {child.info.run_name} |" in report for child in children)


def test_a_server_gone_away_loses_nothing_and_one_command_logs_it_later(tmp_path):
    store, port = tmp_path / "server", free_port()
    work = tmp_path / "work"
    work.mkdir()
    url = f"http://127.0.0.1:{port}"  # nothing listens yet: the server is down when the run logs
    proc = run_cli("dataset.limit=3", "retriever=bm25", *HASH, f"tracker.tracking_uri={url}", "hydra.run.dir=run",
                   cwd=work, env=FAST_FAIL)
    assert proc.returncode == 4, proc.stderr
    assert f"could not log the run to mlflow experiment 'ragexp' at {url} " in proc.stderr  # the store given
    assert f"log them later with `python -m ragexp.track {work / 'run'} --tracking-uri {url}`" in proc.stderr
    assert "Traceback" not in proc.stderr and "sqlite" not in proc.stderr
    folder = work / "run"
    [values] = json.loads((folder / "results.json").read_text()).values()
    assert (folder / "questions.json").exists() and (folder / "config.yaml").exists()
    with mlflow_server(f"sqlite:///{store / 'store.db'}", store, port=port):
        later = subprocess.run([sys.executable, "-m", "ragexp.track", str(folder)],  # the store the folder records
                               cwd=work, env=cli_env(FAST_FAIL), capture_output=True, text=True, timeout=300)
        assert later.returncode == 0, later.stderr
        import mlflow

        client = mlflow.MlflowClient(url)
        [run] = client.search_runs([client.get_experiment_by_name("ragexp").experiment_id])
        assert run.info.status == "FINISHED" and run.data.tags["judge"] == "offline-hash"
        for key in ("overall_score", "total_questions", "mrr", "avg_faithfulness"):
            assert run.data.metrics[key] == values[key]
        assert run.data.params["dataset.limit"] == "3" and "job_time_s" in run.data.metrics
        assert {"questions.json", "run.trec", "results.json"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
        assert not (work / "mlflow.db").exists() and not (work / "mlruns").exists()  # no new store beside it


GRID = ("retriever=bm25,dense", "chunker.chunk_size=200,300,400,500")  # 8 jobs


def sweep_until(work, url: str, logged_jobs: int, env: dict) -> tuple[subprocess.Popen, object]:
    """A sweep of GRID against the server at `url`, started; returns once `logged_jobs` jobs are logged
    (their run folders record a run id), with the process and its sweep folder."""
    import time

    proc = subprocess.Popen([sys.executable, "-m", "ragexp", "-m", *GRID, "dataset.limit=3", *HASH,
                             f"tracker.tracking_uri={url}"], cwd=work, env=cli_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        folders = list(work.glob("multirun/*/*/*/tracking.json"))
        if sum(bool(json.loads(f.read_text()).get("run_id")) for f in folders if f.stat().st_size) >= logged_jobs:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the sweep ended before the server could be stopped"
    [sweep_dir] = work.glob("multirun/*/*")
    return proc, sweep_dir


def test_a_sweep_whose_server_goes_away_exits_4_and_track_ends_it_as_it_would_have(tmp_path):
    """MLflow's retries off (as docs/concepts/pipeline.md advises), the server stopped after job 2: the
    sweep ends with exit 4 and the leaderboard of its run folders (not a warning and exit 0); the
    next command against the store ends its parent FAILED, tagged with the jobs not logged;
    `python -m ragexp.track SWEEP_FOLDER` logs them under it and ends it FINISHED, with its leaderboard."""
    store, port = tmp_path / "server", free_port()
    work = tmp_path / "work"
    work.mkdir()
    backend = f"sqlite:///{store / 'store.db'}"
    with mlflow_server(backend, store, port=port) as url:
        proc, sweep_dir = sweep_until(work, url, 2, FAST_FAIL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 4, err
    assert f"the sweep's run {json.loads((sweep_dir / 'sweep.json').read_text())['parent_run_id']} could not be ended in " \
           f"mlflow experiment 'ragexp' at {url} " in err
    assert "leaderboard from the run folders" in out and "Traceback" not in err and "UserWarning" not in err
    ended = json.loads((sweep_dir / "sweep.json").read_text())["ended"]
    assert ended["jobs_not_logged"] and len(ended["jobs_not_logged"]) <= 6
    parent = json.loads((sweep_dir / "sweep.json").read_text())["parent_run_id"]
    assert f"`python -m ragexp.track {sweep_dir}`" in err
    with mlflow_server(backend, store, port=port):
        import mlflow

        client = mlflow.MlflowClient(url)
        assert client.get_run(parent).info.status == "RUNNING"
        nxt = run_cli("dataset.limit=2", "retriever=bm25", *HASH, f"tracker.tracking_uri={url}", cwd=work, env=FAST_FAIL)
        assert nxt.returncode == 0, nxt.stderr
        closed = client.get_run(parent)
        assert closed.info.status == "FAILED"
        assert closed.data.tags["ragexp.jobs_not_logged"] == ", ".join(ended["jobs_not_logged"])
        later = subprocess.run([sys.executable, "-m", "ragexp.track", str(sweep_dir)], cwd=work, env=cli_env(FAST_FAIL),
                               capture_output=True, text=True, timeout=600)
        assert later.returncode == 0, later.stderr
        assert f"sweep run {parent} ended FINISHED" in later.stdout and "leaderboard (" in later.stdout
        ended_run = client.get_run(parent)
        children = client.search_runs([ended_run.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")
        assert ended_run.info.status == "FINISHED" and ended_run.data.tags["ragexp.jobs_ok"] == "8"
        assert len(children) == 8 and {c.info.status for c in children} == {"FINISHED"}
        assert not list(sweep_dir.glob("*/failure.json"))


def test_a_sweep_rides_out_a_server_outage_with_mlflows_default_retries(tmp_path):
    """With MLflow's default retries, a server down for a while (20 s here; 46 s by hand) loses nothing:
    the sweep waits for it and ends 0 with every job logged under its parent."""
    import time

    store, port = tmp_path / "server", free_port()
    work = tmp_path / "work"
    work.mkdir()
    backend = f"sqlite:///{store / 'store.db'}"
    with mlflow_server(backend, store, port=port) as url:
        proc, sweep_dir = sweep_until(work, url, 2, {})
    time.sleep(20)
    with mlflow_server(backend, store, port=port):
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err
        import mlflow

        client = mlflow.MlflowClient(url)
        parent = json.loads((sweep_dir / "sweep.json").read_text())["parent_run_id"]
        run = client.get_run(parent)
        children = client.search_runs([run.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")
        assert run.info.status == "FINISHED" and len(children) == 8 and {c.info.status for c in children} == {"FINISHED"}
        assert all(json.loads(f.read_text())["run_id"] for f in sweep_dir.glob("*/tracking.json"))


def ui_lines(proc: subprocess.Popen, until: str, seen: list[str]) -> str:
    """The lines `python -m ragexp.ui` prints, read (in a thread) until one starts with `until`
    (returned); a 180 s guard against a server that never answers (its start is not the subject here)."""
    import queue
    import threading

    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=180).rstrip("\n")
        except queue.Empty:
            pytest.fail(f"ragexp.ui printed no {until!r} line: {seen}")
        seen.append(line)
        if line.startswith(until):
            return line


def test_ragexp_ui_starts_mlflow_light_on_the_store_and_prints_the_last_runs_link(tmp_path):
    """`python -m ragexp.ui` over a local store: `mlflow server` with one worker and no job runner,
    the link to the last run's questions, served until Ctrl-C; over a tracking server it prints that
    server's link and starts nothing."""
    import os
    import signal

    from conftest import run_app

    import mlflow

    proc = run_app("dataset.limit=3", "retriever=bm25", *HASH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    [run] = mlflow.MlflowClient(uri).search_runs([mlflow.MlflowClient(uri).get_experiment_by_name("ragexp").experiment_id])
    port = free_port()
    env = cli_env({"MLFLOW_TRACKING_URI": uri})  # the store a user's shell names
    ui = subprocess.Popen([sys.executable, "-m", "ragexp.ui", "--port", str(port)], cwd=tmp_path, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen: list[str] = []
    address = f"http://127.0.0.1:{port}"
    try:
        link = ui_lines(ui, "MLflow UI: ", seen)
        assert link == f"MLflow UI: {address}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}/traces"
        [server] = [int(p) for p in open(f"/proc/{ui.pid}/task/{ui.pid}/children").read().split()]
        command = open(f"/proc/{server}/cmdline").read().split("\0")
        environ = open(f"/proc/{server}/environ").read().split("\0")
        assert command[command.index("--workers") + 1] == "1" and uri in command
        assert "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false" in environ
        assert mlflow.MlflowClient(address).get_run(run.info.run_id).info.run_name == run.info.run_name

        remote = subprocess.run([sys.executable, "-m", "ragexp.ui", "--tracking-uri", address], cwd=tmp_path,
                                env=cli_env(), capture_output=True, text=True, timeout=120)
        assert remote.returncode == 0, remote.stderr
        assert remote.stdout.strip() == link  # only the link: the server serves its own UI
    finally:
        os.killpg(ui.pid, signal.SIGINT)
        ui.wait(timeout=60)
    assert ui.returncode == 0 and not os.path.exists(f"/proc/{server}"), seen


def test_ragexp_ui_opens_the_last_sweep_in_the_view_it_printed(small_sweep):
    """The last thing in the store a sweep: its link is the one the sweep printed (its runs only)."""
    from ragexp.ui import last_link

    [printed] = [line.split("http://127.0.0.1:5000/", 1)[1] for line in small_sweep.proc.stdout.splitlines()
                 if line.startswith("MLflow UI: ")]
    assert last_link(small_sweep.uri, "ragexp", "http://127.0.0.1:5000") == f"http://127.0.0.1:5000/{printed}"


def test_ragexp_ui_names_a_store_that_is_not_there(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ragexp.ui", "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}"],
                          cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("ragexp.ui: error: --tracking-uri: no MLflow store at ")
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "none.db").exists()  # one line; no store made in its place
