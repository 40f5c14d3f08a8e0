"""`run_app` (conftest) runs the Hydra app inside the test process: each run logs to the store of
its own folder, and leaves logging, Hydra, MLflow, the environment and the working directory as
they were, so that tests do not see each other's runs."""
import logging
import os
import sys

from conftest import HASH, mlflow_runs, run_app

QUICK = ("dataset.limit=2", "retriever=bm25", *HASH)


def test_in_process_runs_leave_no_state_behind(tmp_path, caplog):
    from hydra.core.global_hydra import GlobalHydra

    root = logging.getLogger()
    handlers, level, cwd, argv = root.handlers[:], root.level, os.getcwd(), sys.argv[:]
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, name in ((first, "one"), (second, "two")):
        folder.mkdir()
        proc = run_app(*QUICK, f"run_name={name}", cwd=folder, env={"RAGEXP_IN_PROCESS_CHECK": "1"})
        assert proc.returncode == 0, proc.stderr
        assert f"ragexp run '{name}'" in proc.stdout and "work:" in proc.stdout  # the run's output was captured
        assert next(folder.glob("outputs/*/*/*.log")).stat().st_size > 0  # Hydra's file log, in the run's folder
    # each run logged into the store of the folder it ran in, not into the one before
    assert [r.info.run_name for r in mlflow_runs(first)[1]] == ["one"]
    assert [r.info.run_name for r in mlflow_runs(second)[1]] == ["two"]

    import mlflow

    mlflow.set_tracking_uri(None)  # mlflow_runs above points MLflow at a store; the autouse fixture resets it too
    assert root.handlers == handlers and root.level == level
    assert not [h for name in ("", "ragexp", "hydra") for h in logging.getLogger(name).handlers
                if str(tmp_path) in str(getattr(h, "baseFilename", ""))]
    assert os.getcwd() == cwd and sys.argv == argv and "RAGEXP_IN_PROCESS_CHECK" not in os.environ
    assert os.environ.get("MLFLOW_TRACKING_URI") == uri and str(tmp_path) not in mlflow.get_tracking_uri()
    assert mlflow.active_run() is None and not GlobalHydra.instance().is_initialized()
    with caplog.at_level(logging.WARNING, logger="ragexp"):  # pytest's log capture still works
        logging.getLogger("ragexp").warning("after the runs")
    assert "after the runs" in caplog.text


def test_in_process_exit_status_and_streams(tmp_path):
    bad = run_app(*QUICK, "chunker.chunk_overlap=600", "tracker=none", cwd=tmp_path)
    assert bad.returncode == 2 and "ragexp: error: chunker.chunk_overlap" in bad.stderr
    usage = run_app("--help", cwd=tmp_path)
    assert usage.returncode == 0 and "Groups: choose one option per group" in usage.stdout and usage.stderr == ""
