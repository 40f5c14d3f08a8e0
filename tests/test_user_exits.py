"""Ends a run cannot pass through (docs/concepts/failures.md): os._exit() and sys.exit() in code the
run calls (a system=python function in threads or worker processes, a component, a judge), a run folder that
cannot be written, a disk that fills as the run writes its folder, SIGTERM and Ctrl-C. Each ends
the command with one line and the right status, never a pass or a traceback; what no code can see
(a kill) is named by the next command in the same outputs folder and by `python -m ragexp.track`.
Real processes, signals and file size limits: the process tier."""
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import HASH, TEST_KEY_ENV, cli_env, llm_args, run_cli
from test_own_system import RECORDED, SCORING

pytestmark = pytest.mark.process

EXITING = """import os, sys


def answer(question, params):
    if 'port' in question:
        {call}
    return {{'answer': 'ok', 'contexts': ['c']}}
"""
FUNCTION_ARGS = ("system=python", "dataset=outputs", f"dataset.path={RECORDED}", SCORING, "cache.enabled=false",
                 "tracker=none")


def the_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("call", ["os._exit(0)", "sys.exit(0)"])
@pytest.mark.parametrize("workers,concurrency", [("threads", 1), ("threads", 4), ("processes", 2)])
def test_a_system_function_that_exits_ends_the_command_with_4_naming_it(tmp_path, call, workers, concurrency):
    (tmp_path / "leaving_rag.py").write_text(EXITING.format(call=call))
    proc = run_cli(*FUNCTION_ARGS, "system.function=leaving_rag:answer", f"system.workers={workers}",
                   f"system.concurrency={concurrency}", "hydra.run.dir=run", cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    line = the_line(proc)
    said = "os._exit(0) was called" if call.startswith("os") else "SystemExit(0) was raised"
    assert line.startswith(f"ragexp: error: {said} in answer() at ") and "leaving_rag.py:6" in line, line
    assert not (tmp_path / "run" / "results.json").exists()


def test_os_exit_whose_stop_the_function_catches_still_fails_the_run(tmp_path):
    (tmp_path / "hiding_rag.py").write_text(EXITING.format(call="try:\n            os._exit(0)\n        except BaseException:\n            pass"))
    proc = run_cli(*FUNCTION_ARGS, "system.function=hiding_rag:answer", "hydra.run.dir=run", cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert the_line(proc).startswith("ragexp: error: os._exit(0) was called in answer() at ")
    assert not (tmp_path / "run" / "results.json").exists()


COMPONENT = """import os, sys

from ragexp.types import Answer


class LeavingGenerator:
    def __init__(self, **_):
        pass

    def generate(self, question, hits):
        {call}
        return Answer("never")
"""


@pytest.mark.parametrize("call", ["os._exit(3)", "sys.exit(3)"])
def test_a_component_that_exits_ends_the_command_with_4_naming_it(tmp_path, call):
    (tmp_path / "leaving_generator.py").write_text(COMPONENT.format(call=call))
    proc = run_cli(*HASH, "retriever=bm25", "dataset.limit=2", "tracker=none", "cache.enabled=false",
                   "generator._target_=leaving_generator.LeavingGenerator", "hydra.run.dir=run", cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    line = the_line(proc)
    said = "os._exit(3) was called" if call.startswith("os") else "SystemExit(3) was raised"
    assert line.startswith(f"ragexp: error: {said} in generate() at ") and "leaving_generator.py:11" in line, line


CRITERION = """import os, sys


def check(question, contexts, answer, reference, row):
    if 'port' in question:
        {call}
    return True
"""
EXITS_RUBRIC = """_target_: ragexp.judges.rubric.Rubric
name: null
mode: single_call
criteria:
  exits:
    type: python
    instructions: Ends the process on one question.
    function: leaving_check:check
"""
ANSWERING = "def answer(question, params):\n    return {'answer': 'ok', 'contexts': ['c']}\n"


@pytest.mark.parametrize("call", ["os._exit(0)", "sys.exit(0)"])
@pytest.mark.parametrize("workers", ["threads", "processes"])
def test_a_judge_that_exits_ends_the_command_with_4_naming_it(tmp_path, call, workers):
    """The judge a user writes: a rubric's python criterion (docs/how-to/rubrics.md); it runs in the
    command's process whichever way the system's questions are answered."""
    (tmp_path / "leaving_check.py").write_text(CRITERION.format(call=call))
    (tmp_path / "answering_rag.py").write_text(ANSWERING)
    (tmp_path / "conf" / "rubric").mkdir(parents=True)
    (tmp_path / "conf" / "rubric" / "exits.yaml").write_text(EXITS_RUBRIC)
    proc = run_cli("--config-dir", str(tmp_path / "conf"), *FUNCTION_ARGS, "system.function=answering_rag:answer",
                   f"system.workers={workers}", "judge=rubric", "rubric=exits", "hydra.run.dir=run", cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    line = the_line(proc)
    said = "os._exit(0) was called" if call.startswith("os") else "SystemExit(0) was raised"
    assert line.startswith(f"ragexp: error: {said} in check() at ") and "leaving_check.py:6" in line, line
    assert not (tmp_path / "run" / "results.json").exists()


def test_os_exit_in_a_process_forked_under_the_guard_is_the_real_one():
    """A child forked while a run works (multiprocessing's fork, os.fork) ends as os._exit ends it."""
    from ragexp.base.user_exits import ExitCalled, exits_guarded

    with exits_guarded():
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        _, status = os.waitpid(pid, 0)
        with pytest.raises(ExitCalled, match=r"os._exit\(5\) was called in test_os_exit_in_a_process_forked"):
            os._exit(5)
    assert os.waitstatus_to_exitcode(status) == 7


KILLED_RAG = """import os, signal


def answer(question, params):
    if 'port' in question:
        os.kill(os.getpid(), signal.SIGKILL)
    return {'answer': 'ok', 'contexts': ['c']}
"""


def test_a_run_that_ended_without_a_word_is_named_by_the_next_command_and_by_track(tmp_path):
    (tmp_path / "killed_rag.py").write_text(KILLED_RAG)
    killed = run_cli(*FUNCTION_ARGS, "system.function=killed_rag:answer", cwd=tmp_path)
    assert killed.returncode == -signal.SIGKILL
    [folder] = tmp_path.glob("outputs/*/*")
    track = subprocess.run([sys.executable, "-m", "ragexp.track", str(folder)], cwd=tmp_path, env=cli_env(),
                           capture_output=True, text=True, timeout=120)
    assert track.returncode == 4, track.stderr
    assert the_line(track).startswith(f"ragexp.track: error: {folder} is incomplete: the run that wrote it (process ")
    after = run_cli("dataset=outputs", f"dataset.path={RECORDED}", SCORING, "tracker=none", cwd=tmp_path)
    assert after.returncode == 0, after.stderr
    [line] = [x for x in after.stderr.splitlines() if "incomplete" in x]
    assert line.startswith(f"ragexp: warning: {folder} is incomplete: the run that wrote it")
    again = run_cli("dataset=outputs", f"dataset.path={RECORDED}", SCORING, "tracker=none", cwd=tmp_path)
    assert again.returncode == 0 and "incomplete" not in again.stderr  # named once
    track = subprocess.run([sys.executable, "-m", "ragexp.track", str(folder)], cwd=tmp_path, env=cli_env(),
                           capture_output=True, text=True, timeout=120)
    assert track.returncode == 4 and "is incomplete" in track.stderr  # and track still says it


def file_size_limit(limit: int):
    """A child's files cannot grow past `limit` bytes (RLIMIT_FSIZE); a write past it fails with
    EFBIG ("File too large") as one to a full disk fails with ENOSPC, once SIGXFSZ is ignored."""
    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return limited


def limited_run(cwd: Path, limit: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ragexp", *args], cwd=cwd, env=cli_env({"PYTHONDONTWRITEBYTECODE": "1"}),
                          capture_output=True, text=True, timeout=300, preexec_fn=file_size_limit(limit))


FULL_ARGS = (*HASH, "retriever=bm25", "dataset.limit=8", "tracker=none", "cache.enabled=false", "embedding_map=false")


def test_a_disk_that_fills_as_the_folder_is_written_exits_4_and_leaves_it_named_incomplete(tmp_path):
    whole = run_cli(*FULL_ARGS, "hydra.run.dir=whole", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    sizes = {str(p.relative_to(tmp_path / "whole")): p.stat().st_size for p in (tmp_path / "whole").rglob("*") if p.is_file()}
    # what Hydra writes before the run (its config and log) fits; the audit trail, written as the run ends, does not
    limit = max(sizes[name] for name in (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "ragexp.log")) + 2000
    assert limit < sizes["questions.jsonl"], sizes
    full = limited_run(tmp_path, limit, *FULL_ARGS)
    [folder] = tmp_path.glob("outputs/*/*")
    assert full.returncode == 4, full.stdout + full.stderr
    line = the_line(full)
    assert line.startswith(f"ragexp: error: cannot write the run folder {folder} (File too large") and "incomplete" in line
    assert "Traceback" not in full.stderr
    assert not (folder / "results.json").exists()  # never results.json without the rest
    after = run_cli(*FULL_ARGS, cwd=tmp_path)
    assert after.returncode == 0, after.stderr
    assert f"ragexp: warning: {folder} is incomplete" in after.stderr
    track = subprocess.run([sys.executable, "-m", "ragexp.track", str(folder)], cwd=tmp_path, env=cli_env(),
                           capture_output=True, text=True, timeout=120)
    assert track.returncode == 4 and f"{folder} is incomplete" in track.stderr, track.stderr


def test_a_run_folder_that_cannot_be_written_before_work_exits_2_naming_it(tmp_path):
    proc = limited_run(tmp_path, 0, *FULL_ARGS, "hydra.run.dir=run")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert the_line(proc).startswith("ragexp: error: hydra.run.dir: cannot write the run folder run (File too large")


def being_logged(store: Path, pid: int) -> bool:
    """Whether the MLflow run of the job `pid` is open (read from the store's tables, as tests/test_kill9.py does)."""
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=0.1) as db:
            return db.execute("SELECT COUNT(*) FROM runs JOIN tags ON runs.run_uuid = tags.run_uuid WHERE "
                              "runs.status = 'RUNNING' AND tags.key = 'ragexp.job_pid' AND tags.value = ?",
                              (str(pid),)).fetchone()[0] > 0
    except sqlite3.OperationalError:
        return False


def statuses_of(store: Path, pid: int) -> list[str]:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        return [row[0] for row in db.execute("SELECT runs.status FROM runs JOIN tags ON runs.run_uuid = tags.run_uuid "
                                             "WHERE tags.key = 'ragexp.job_pid' AND tags.value = ?", (str(pid),))]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_ctrl_c_while_a_run_is_logged_end_it_killed_without_a_traceback(tmp_path, signum):
    """SIGTERM to the command, or Ctrl-C (SIGINT to its process group, as a terminal sends it) while its
    MLflow run is being logged: the run is KILLED when the command has exited (no next command
    needed), the command exits 128 + the signal with one line."""
    store = tmp_path / "mlflow.db"
    args = (*HASH, "retriever=bm25", "dataset.limit=3", f"tracker.tracking_uri=sqlite:///{store}",
            f"cache.dir={tmp_path / 'cache'}")
    assert run_cli(*args, cwd=tmp_path).returncode == 0  # makes the store and the cache
    killed = 0
    for attempt in range(8):
        victim = subprocess.Popen([sys.executable, "-m", "ragexp", *args], cwd=tmp_path, env=cli_env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 60
        while victim.poll() is None and not being_logged(store, victim.pid) and time.monotonic() < deadline:
            time.sleep(0.001)
        if signum == signal.SIGINT:
            os.killpg(victim.pid, signum)
        else:
            victim.send_signal(signum)
        _, err = victim.communicate(timeout=60)
        assert "Traceback" not in err, err
        statuses = statuses_of(store, victim.pid)
        assert "RUNNING" not in statuses, (attempt, statuses, err)
        if statuses == ["KILLED"]:
            killed += 1
            assert victim.returncode == 128 + signum, err
            assert err.strip().splitlines()[-1].startswith(f"ragexp: error: stopped by {signal.Signals(signum).name}: ")
            if killed == 2:
                break
    assert killed >= 1, "no signal fell while a run was logged"


def test_ctrl_c_while_the_judge_has_queued_requests_ends_at_once(server, tmp_path):
    """Requests that take 100 s, two at a time, six questions: Ctrl-C once two are under way ends the
    command well before the first of them would be answered; the four queued are never sent."""
    server.latency = 100
    args = llm_args(server, generator=False, **{"judge.endpoint.max_concurrency": 2, "judge.endpoint.timeout_s": 300,
                                                "dataset.limit": 6, "tracker": "none", "cache.enabled": "false"})
    victim = subprocess.Popen([sys.executable, "-m", "ragexp", *args], cwd=tmp_path, env=cli_env({TEST_KEY_ENV: "k"}),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while len(server.chat_requests()) < 2 and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(server.chat_requests()) == 2
    stopped = time.monotonic()
    os.killpg(victim.pid, signal.SIGINT)
    _, err = victim.communicate(timeout=90)
    assert time.monotonic() - stopped < 60, "the command waited for the requests under way"
    assert victim.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("ragexp: error: stopped by SIGINT: ")
    assert len(server.chat_requests()) == 2  # the queued ones were cancelled, never sent
    assert not list(tmp_path.glob("outputs/*/*/results.json"))


def test_a_stop_cancels_the_queued_calls_and_does_not_wait_for_those_under_way():
    """map_concurrently and KeyboardInterrupt (Ctrl-C, SIGTERM): the calls not started are never
    started, and the stop is raised without waiting for the calls under way."""
    import threading

    from ragexp.base.concurrency import map_concurrently

    release, started = threading.Event(), []

    def call(item: int) -> int:
        started.append(item)
        if item == 0:
            raise KeyboardInterrupt
        release.wait(120)  # under way until the test lets it go (a hang guard)
        return item

    began = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            map_concurrently(call, range(8), 2, "calls")
        assert time.monotonic() - began < 60, "the stop waited for the calls under way"
        assert len(started) <= 3  # item 0, and at most one more per worker: the others were cancelled
    finally:
        release.set()
