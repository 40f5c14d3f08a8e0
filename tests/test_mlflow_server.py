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
    assert "could not log the run to mlflow experiment 'ragexp'" in proc.stderr
    assert f"log them later with `python -m ragexp.track {work / 'run'}`" in proc.stderr
    assert "Traceback" not in proc.stderr
    folder = work / "run"
    [values] = json.loads((folder / "results.json").read_text()).values()
    assert (folder / "questions.json").exists() and (folder / "config.yaml").exists()
    with mlflow_server(f"sqlite:///{store / 'store.db'}", store, port=port):
        later = subprocess.run([sys.executable, "-m", "ragexp.track", str(folder), "--tracking-uri", url],
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
