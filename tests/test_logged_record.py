"""A run folder records the store it was given and, once logged, its MLflow run (tracking.json): the
recovery advice and `python -m ragexp.track` use that store and never another; `python -m
ragexp.calibrate FOLDER --export N --to mlflow` finds the run; a sweep whose store went away ends
with exit 4 and its leaderboard from the run folders, and its parent run is ended later."""
import json
import os
import socket
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from conftest import HASH, free_port, run_app
from ragexp.store.logged_record import TRACKING_FILE, read_record
from ragexp.config.build import from_yaml

FAST_FAIL = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "2"}


def test_a_logged_folder_records_its_run_and_calibrate_exports_it_without_the_id(tmp_path, monkeypatch, capsys):
    from ragexp.calibrate.__main__ import main as calibrate

    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    proc = run_app("dataset.limit=4", "retriever=bm25", *HASH, f"tracker.tracking_uri={uri}", "hydra.run.dir=run",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    record = read_record(tmp_path / "run")
    assert record["tracking_uri"] == uri and record["experiment"] == "ragexp" and len(record["run_id"]) == 32
    monkeypatch.chdir(tmp_path)
    assert calibrate([str(tmp_path / "run"), "--export", "2", "--to", "mlflow"]) == 0
    out = capsys.readouterr().out
    assert "review queue 'calibrate run" in out and f"python -m ragexp.calibrate {record['run_id']} --labels-from mlflow" in out
    assert not (tmp_path / "mlflow.db").exists()  # the store the folder records, not a new one here


def test_a_folder_never_logged_says_so_in_one_line(tmp_path, capsys):
    from ragexp.calibrate.__main__ import main as calibrate

    proc = run_app("dataset.limit=2", "retriever=bm25", *HASH, "tracker=none", "hydra.run.dir=run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "run" / TRACKING_FILE).exists()
    assert calibrate([str(tmp_path / "run"), "--export", "2", "--to", "mlflow"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"ragexp.calibrate: error: {tmp_path / 'run'}: this run folder was never logged to MLflow (it has no "
                   f"{TRACKING_FILE}: a run of tracker=none or of an older ragexp); log it with "
                   f"`python -m ragexp.track {tmp_path / 'run'}`")


def test_an_unreachable_store_is_the_one_named_and_track_never_makes_another(tmp_path, capsys, monkeypatch):
    """A run given a server that does not answer (its URI with credentials) names that server, never
    MLflow's default store here; `track` then asks for the URI (its credentials were never written),
    and given it, still logs nowhere else."""
    from ragexp.track import main as track

    port = free_port()
    url, masked = f"http://alice:s3cret@127.0.0.1:{port}", f"http://***@127.0.0.1:{port}"
    proc = run_app("dataset.limit=2", "retriever=bm25", *HASH, "tracker.tracking_uri=${oc.env:STORE}", "hydra.run.dir=run",
                   cwd=tmp_path, env={**FAST_FAIL, "STORE": url})
    assert proc.returncode == 4, proc.stderr
    folder = tmp_path / "run"
    assert f"could not log the run to mlflow experiment 'ragexp' at {masked} " in proc.stderr
    assert f"`python -m ragexp.track {folder} --tracking-uri URI` (URI: {masked} with its credentials)" in proc.stderr
    assert "sqlite" not in proc.stderr and "s3cret" not in proc.stderr + proc.stdout
    record = read_record(folder)
    assert record["tracking_uri"] == masked and record["credentials_masked"] and record["run_id"] is None
    assert "s3cret" not in (folder / TRACKING_FILE).read_text()

    monkeypatch.chdir(tmp_path)
    assert track([str(folder)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ragexp.track: error: {folder}: its store {masked} needs credentials, which are never written: give the "
        "URI again with --tracking-uri URI")
    for key, value in FAST_FAIL.items():
        monkeypatch.setenv(key, value)
    assert track([str(folder), "--tracking-uri", url]) == 4
    assert masked in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


def gone_process() -> dict[str, str]:
    """Process tags of a process of this host that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return {"ragexp.host": socket.gethostname(), "ragexp.pid": str(child.pid), "ragexp.process_started": "1"}


class GoneStore:
    """A tracker whose store went away once the sweep's jobs were done."""

    tracking_uri = "http://127.0.0.1:9"

    def where(self):
        return "mlflow experiment 'ragexp' at http://127.0.0.1:9"

    def end_sweep(self, *args, **kwargs):
        from ragexp.errors import StoreUnreachable

        raise StoreUnreachable("tracker.tracking_uri: cannot use MLflow store http://127.0.0.1:9 (Connection refused)")


def test_a_sweep_whose_store_went_away_exits_4_and_the_next_commands_end_its_parent(tmp_path, capsys):
    """The sweep's end cannot close its parent run (the store is gone): exit 4 (not a warning and exit
    0), its leaderboard from the run folders, the end recorded in sweep.json. The next command against
    the store ends the parent FAILED, tagged with the jobs not logged; `python -m ragexp.track
    SWEEP_FOLDER` logs them under it and ends it as the sweep would have."""
    from ragexp.store.logged_record import record_store
    from ragexp.sweep.callbacks import SweepTracking
    from ragexp.track import main as track

    sweep_dir = tmp_path / "multirun" / "sweep"
    for number, retriever in enumerate(("bm25", "dense")):
        proc = run_app("dataset.limit=3", f"retriever={retriever}", *HASH, "tracker=none",
                       f"hydra.run.dir={sweep_dir / str(number)}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        os.rename(sweep_dir / str(number) / "results.json", sweep_dir / str(number) / "results.tmp")
        results = json.loads((sweep_dir / str(number) / "results.tmp").read_text())
        (sweep_dir / str(number) / "results.json").write_text(json.dumps({f"retriever={retriever}": next(iter(results.values()))}))
        record_store(sweep_dir / str(number), {"tracking_uri": None, "experiment": "ragexp", "directory": str(tmp_path)})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = from_yaml("tracker/mlflow", experiment="ragexp", tracking_uri=uri).start_sweep("sweep multirun/sweep", {
        **gone_process(), "sweep_dir": str(sweep_dir), "sweep_overrides": "retriever=bm25,dense"})
    (sweep_dir / "sweep.json").write_text(json.dumps({"parent_run_id": parent, "tracking_uri": uri}))

    callback = SweepTracking()
    callback.tracker, callback.parent_id = GoneStore(), parent
    with pytest.raises(SystemExit) as ended:
        callback.on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}}))
    assert ended.value.code == 4
    out, err = capsys.readouterr()
    assert "leaderboard from the run folders" in out and "| retriever=bm25 |" in out.replace("  ", " ")
    assert f"the sweep's run {parent} could not be ended in mlflow experiment 'ragexp' at http://127.0.0.1:9" in err
    assert f"`python -m ragexp.track {sweep_dir}`" in err
    assert json.loads((sweep_dir / "sweep.json").read_text())["ended"]["jobs_not_logged"] == ["retriever=bm25",
                                                                                             "retriever=dense"]
    import mlflow

    from ragexp.store import mlflow_client

    mlflow_client.OPENED.clear()  # the next command: a process that opens the store afresh
    client = mlflow.MlflowClient(uri)
    from_yaml("tracker/mlflow", experiment="ragexp", tracking_uri=uri).client()
    closed = client.get_run(parent)
    assert closed.info.status == "FAILED"
    assert closed.data.tags["ragexp.jobs_not_logged"] == "retriever=bm25, retriever=dense"

    mlflow_client.OPENED.clear()
    assert track([str(sweep_dir), "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    ended_run = client.get_run(parent)
    children = client.search_runs([ended_run.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")
    assert ended_run.info.status == "FINISHED" and len(children) == 2
    assert {c.info.run_name for c in children} == {"retriever=bm25", "retriever=dense"}
    assert ended_run.data.tags["ragexp.jobs_ok"] == "2" and "leaderboard (" in out
    assert all(read_record(sweep_dir / n)["run_id"] for n in ("0", "1"))
    assert "ended" not in json.loads((sweep_dir / "sweep.json").read_text())
    assert track([str(sweep_dir), "--tracking-uri", uri]) == 0  # again: nothing left to log or end
    assert "nothing to do" in capsys.readouterr().out
    assert len(client.search_runs([ended_run.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")) == 2
