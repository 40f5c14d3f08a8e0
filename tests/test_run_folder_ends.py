"""A run folder's end (docs/concepts/failures.md, "Ends a run cannot pass through"): one that cannot
be made is refused before any work (exit 2), one that cannot be written as the run ends is left
without results.json (exit 4), and one whose run ended without a word is named once by the next
command in the same outputs folder and by `python -m ragexp.track FOLDER`. In this process: the
processes, signals and file size limits are tests/test_user_exits.py's."""
import json
import socket

import pytest

import ragexp
from conftest import call_in, run_app
from ragexp.base.processes import this_process
from ragexp.errors import RagexpError
from ragexp.store.run_owner import INCOMPLETE, OWNER, ended_without_results
from test_own_system import RECORDED, SCORING

ARGS = ("dataset=outputs", f"dataset.path={RECORDED}", SCORING, "tracker=none", "cache.enabled=false")


def gone_process() -> dict:
    """The record of a process that no longer runs: this pid, with another start time (a pid reused)."""
    me = this_process()
    return {**me, "started": (me["started"] or 0) + 1}


def left_folder(root, name: str = "2026-01-01/00-00-00-000000"):
    """A run folder as a run killed at work leaves it: its config, its owner record, no results."""
    folder = root / "outputs" / name
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text("{}\n")
    (folder / OWNER).write_text(json.dumps(gone_process()))
    return folder


def track(*argv: str, cwd):
    from ragexp.track import main

    return call_in(lambda: main(list(argv)), ["ragexp.track", *argv], cwd)


def test_a_folder_left_without_results_is_named_once_by_the_next_command_and_by_track(tmp_path):
    folder = left_folder(tmp_path)
    done = left_folder(tmp_path, "2026-01-01/00-00-01-000000")
    (done / "results.json").write_text("{}\n")  # a complete folder is no concern
    live = left_folder(tmp_path, "2026-01-01/00-00-02-000000")
    (live / OWNER).write_text(json.dumps(this_process()))  # a run under way: not named
    refused = track(str(folder), cwd=tmp_path)
    assert refused.returncode == 4
    assert refused.stderr.startswith(f"ragexp.track: error: {folder} is incomplete: the run that wrote it (process ")
    first = run_app(*ARGS, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    [line] = [x for x in first.stderr.splitlines() if "incomplete" in x]
    assert line.startswith(f"ragexp: warning: {folder} is incomplete: the run that wrote it (process ")
    assert f"on {socket.gethostname()}) ended without its results.json" in line
    assert (folder / INCOMPLETE).is_file() and not (folder / OWNER).exists()
    second = run_app(*ARGS, cwd=tmp_path)
    assert second.returncode == 0 and "incomplete" not in second.stderr  # said once
    assert ended_without_results(folder) is not None and ended_without_results(done) is None
    assert ended_without_results(live) is None
    again = track(str(folder), cwd=tmp_path)
    assert again.returncode == 4 and "is incomplete" in again.stderr  # track says it still
    under_way = track(str(live), cwd=tmp_path)
    assert under_way.returncode == 2 and "its run is still under way" in under_way.stderr


def test_a_run_in_a_fixed_folder_names_the_run_before_it_there_and_takes_it_over(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / OWNER).write_text(json.dumps(gone_process()))
    first = run_app(*ARGS, "hydra.run.dir=run", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stderr.startswith(f"ragexp: warning: {folder} is incomplete: the run that wrote it")
    assert (folder / "results.json").is_file() and not (folder / INCOMPLETE).exists()


def test_a_folder_given_again_keeps_no_results_of_the_run_before(tmp_path, monkeypatch):
    """hydra.run.dir=run: a run that fails there leaves no results.json, not even the last run's."""
    assert run_app(*ARGS, "hydra.run.dir=run", cwd=tmp_path).returncode == 0
    (tmp_path / "leaving_now.py").write_text("import sys\n\n\ndef answer(question):\n    sys.exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    failed = run_app(*ARGS, "system=python", "system.function=leaving_now:answer", "hydra.run.dir=run", cwd=tmp_path)
    assert failed.returncode == 4, failed.stderr
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_run_folder_that_cannot_be_made_exits_2_naming_it(tmp_path):
    (tmp_path / "afile").write_text("not a folder\n")
    done = run_app(*ARGS, "hydra.run.dir=afile/run", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("ragexp: error: hydra.run.dir: cannot write the run folder afile/run (Not a directory")
    sweep = run_app("-m", *ARGS, "dataset.limit=1,2", "hydra.sweep.dir=afile/sweep", cwd=tmp_path)
    assert sweep.returncode == 2, sweep.stderr
    assert sweep.stderr.strip().splitlines()[-1].startswith("ragexp: error: hydra.sweep.dir: cannot write the run folder afile/sweep")
    with pytest.raises(RagexpError, match=r"cannot write the run folder .*afile/api \(Not a directory"):
        ragexp.evaluate(RECORDED, overrides=[SCORING, "cache.enabled=false"], output_dir=tmp_path / "afile" / "api")


def test_a_folder_that_cannot_be_written_as_the_run_ends_exits_4_without_results(tmp_path):
    """A file of the folder that cannot be written (here run.json, a folder in the way; a full disk
    in the process tier): exit 4, one line naming the folder and the file, and no results.json."""
    (tmp_path / "run" / "run.json").mkdir(parents=True)
    done = run_app(*ARGS, "hydra.run.dir=run", cwd=tmp_path)
    assert done.returncode == 4, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("ragexp: error: cannot write the run folder ") and "(Is a directory: " in line
    assert "run.json): it is left incomplete, without results.json, and nothing was logged" in line
    assert not (tmp_path / "run" / "results.json").exists() and (tmp_path / "run" / "questions.jsonl").exists()


def test_a_log_file_that_cannot_be_written_is_said_once(tmp_path, capsys, monkeypatch):
    """Hydra's ragexp.log on a full disk: one line, not Python's traceback for every log line lost."""
    import logging

    from ragexp.run.app import log_file_errors_said_once

    handler = logging.FileHandler(tmp_path / "ragexp.log")
    handler.stream.close()
    handler.stream = (tmp_path / "ragexp.log").open("r")  # a stream every write to fails, as on a full disk
    # the job's handlers alone: a console handler an earlier in-process run of this worker left on the root
    # logger writes to a stream pytest has closed since, and would print its own "Logging error"
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])
    lines = logging.getLogger("ragexp.test")
    monkeypatch.setattr(lines, "propagate", True)
    levels = {name: logging.getLogger(name).level for name in ("ragexp.test", "ragexp")}
    for name in levels:
        monkeypatch.setattr(logging.getLogger(name), "handlers", [])
        logging.getLogger(name).setLevel(logging.NOTSET)
    try:
        log_file_errors_said_once()
        lines.warning("one")
        lines.warning("two")
    finally:
        handler.close()
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    err = capsys.readouterr().err
    assert err.count(f"ragexp: warning: cannot write the log {tmp_path / 'ragexp.log'} (") == 1, err
    assert "Traceback" not in err and "Logging error" not in err
