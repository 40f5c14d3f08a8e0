"""`system.workers=processes`: a system=python function called in worker processes. A call stuck
past `timeout_s` is killed and its worker replaced, a worker that crashes (a kill) fails its
question only, and sys.exit() or os._exit() in the function ends the run naming it, as in threads."""
import os
import signal
import time

import pytest

from conftest import compose
from test_own_system import RECORDED, SCORING
from ragexp.errors import QuestionFailed, RagexpError, UserCodeStopped
from ragexp.types import Dataset, Question
from ragexp.config.build import from_yaml

# worker processes started for each test, calls answered within a 5 s deadline, a stuck one killed at it
pytestmark = pytest.mark.process

MODULE = """import os, signal, sys, time


def answer(question, params):
    if "stuck" in question:
        time.sleep(120)
    if "crash" in question:
        os.kill(os.getpid(), signal.SIGKILL)
    if "exit" in question:
        os._exit(3)
    if "leave" in question or params.get("leave"):
        sys.exit(0)
    if "fail" in question:
        raise ValueError("index offline")
    return {"answer": f"{question} by {os.getpid()}", "contexts": [params.get("context", "c")]}
"""


@pytest.fixture
def system(tmp_path, monkeypatch):
    (tmp_path / "worker_rag.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    made = from_yaml("system/python", function="worker_rag:answer", params={"context": "port 7070"}, concurrency=2, timeout_s=5, workers="processes")
    made.start(Dataset("d", (), ()))
    yield made
    made.close()


def ask(system, text):
    return system.respond(Question("q", text, ()))


def test_questions_are_answered_in_other_processes_with_their_params(system):
    output = ask(system, "which port?")
    assert output.answer.text.startswith("which port? by ") and not output.answer.text.endswith(str(os.getpid()))
    assert [h.chunk.text for h in output.hits] == ["port 7070"]


def test_a_stuck_call_is_killed_at_the_deadline_and_its_worker_replaced(system):
    workers = {w.process.pid for w in system._pool.all}
    started = time.monotonic()
    with pytest.raises(QuestionFailed, match=r"did not answer within system.timeout_s=5 s \(its worker process was killed"):
        ask(system, "stuck?")
    assert time.monotonic() - started < 8
    now = {w.process.pid for w in system._pool.all}
    [killed] = workers - now
    assert len(now) == 2 and all(w.process.is_alive() for w in system._pool.all)
    with pytest.raises(ProcessLookupError):
        os.kill(killed, 0)
    assert ask(system, "next?").answer.text.startswith("next? by ")
    assert system.counters() == {"system_calls": 2, "system_failures": 1}


def test_a_crashed_worker_fails_its_question_only(system):
    with pytest.raises(QuestionFailed, match=rf"its worker process died \(exit code -{signal.SIGKILL:d}\)"):
        ask(system, "crash?")
    with pytest.raises(QuestionFailed, match="raised ValueError: index offline"):
        ask(system, "fail?")
    assert ask(system, "then?").answer.text.startswith("then? by ")


def test_sys_exit_in_a_worker_stops_the_run_naming_the_function(system):
    with pytest.raises(UserCodeStopped, match=r"SystemExit\(0\) was raised .*in answer\(\) at .*worker_rag.py:12"):
        ask(system, "leave?")


def test_os_exit_in_a_worker_stops_the_run_naming_the_function(system):
    with pytest.raises(UserCodeStopped, match=r"os._exit\(3\) was called in answer\(\) at .*worker_rag.py:10"):
        ask(system, "exit?")


def test_a_run_with_worker_processes(tmp_path, monkeypatch):
    from ragexp.run.pipeline import run

    (tmp_path / "worker_rag.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = run(compose("system=python", "system.function=worker_rag:answer", "system.workers=processes",
                         "system.concurrency=2", "dataset=outputs", f"dataset.path={RECORDED}", SCORING,
                         "tracker=none", "cache.enabled=false"))
    assert result.aggregates["failed_questions"] == 0
    assert {r.answer.text.rsplit(" by ", 1)[1] for r in result.questions} - {str(os.getpid())}


def test_sys_exit_in_a_worker_ends_the_command_with_exit_4(tmp_path, monkeypatch):
    from conftest import run_app

    (tmp_path / "worker_rag.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    proc = run_app("system=python", "system.function=worker_rag:answer", "system.workers=processes",
                   "+system.params.leave=1", "dataset=outputs", f"dataset.path={RECORDED}", SCORING, "tracker=none",
                   "cache.enabled=false", "hydra.run.dir=run", cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("ragexp: error: SystemExit(0) was raised in answer() at ") and "worker_rag.py:12" in line
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_function_handed_over_in_python_cannot_go_to_workers(tmp_path):
    import ragexp

    with pytest.raises(RagexpError, match="system.workers=processes: each worker imports the function"):
        ragexp.evaluate(RECORDED, system=lambda q: "x", overrides=["system.workers=processes", SCORING, "cache.enabled=false"],
                        output_dir=tmp_path / "api")
