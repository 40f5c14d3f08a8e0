"""`python -m ragexp.track` tells a store that has no such parent run (the folder is logged on its
own) from a store that did not answer (asked again, then exit 4 and nothing logged)."""
import json

import pytest

from conftest import HASH, free_port, mlflow_runs, run_app
from ragexp.track import main as track

PARENT = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def job_folder(tmp_path, monkeypatch):
    """A sweep job's folder (multirun-like: sweep.json beside it names a parent run)."""
    proc = run_app("dataset.limit=2", "retriever=bm25", *HASH, "tracker=none", "hydra.run.dir=sweep/0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "sweep" / "sweep.json").write_text(json.dumps({"parent_run_id": PARENT}))
    monkeypatch.setattr("ragexp.track.LOOKUP_WAIT_S", 0.0)
    return tmp_path / "sweep" / "0"


def test_a_parent_run_the_store_does_not_have_is_left_out(job_folder, tmp_path, capsys):
    assert track([str(job_folder), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]) == 0
    _, [run] = mlflow_runs(tmp_path)
    assert "mlflow.parentRunId" not in run.data.tags and run.info.status == "FINISHED"
    assert "under sweep run" not in capsys.readouterr().out


def test_a_store_that_does_not_answer_stops_the_command_with_status_4(job_folder, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    import ragexp.track as command

    lookups, absent = [], command.run_absent

    def counted(err):
        lookups.append(type(err).__name__)
        return absent(err)

    monkeypatch.setattr(command, "run_absent", counted)  # the name the command calls
    assert track([str(job_folder), "--tracking-uri", url]) == 4
    err = capsys.readouterr().err
    assert f"cannot look up the sweep's parent run {PARENT} in " in err and f"{url} after 3 attempts" in err
    assert "nothing was logged" in err and "Traceback" not in err
    assert len(lookups) == 3  # asked three times before giving up
