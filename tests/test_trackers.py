"""The MLflow tracker against a real SQLite store."""
from pathlib import Path

from ragexp.store.trackers import MlflowTracker, artifacts_beside


def test_a_sqlite_store_keeps_its_artifacts_beside_the_database_not_in_the_working_folder(tmp_path, monkeypatch):
    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    store.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    tracker = MlflowTracker("ragexp", f"sqlite:///{store / 'mlflow.db'}")

    run_id = tracker.log_failed("job", {"retriever": {"top_k": 5}}, None, "endpoint down")

    client = tracker.client()
    artifact_uri = client.get_run(run_id).info.artifact_uri
    assert artifact_uri.startswith((store / "mlruns").as_uri())
    logged = list((store / "mlruns").rglob("failure.txt"))
    assert len(logged) == 1 and logged[0].read_text() == "endpoint down\n"
    assert list(elsewhere.iterdir()) == []


def test_only_sqlite_stores_get_an_artifact_folder_chosen_by_ragexp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert artifacts_beside("sqlite:///runs/mlflow.db") == (tmp_path / "runs" / "mlruns").as_uri()
    assert artifacts_beside("sqlite:////srv/mlflow.db") == Path("/srv/mlruns").as_uri()
    assert artifacts_beside("http://127.0.0.1:5000") is None
    assert artifacts_beside("postgresql://db/mlflow") is None
